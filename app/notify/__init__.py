"""Notifications: webhook targets told about new and reopened flags (README "Notifications")."""
