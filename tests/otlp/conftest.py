"""The service under test for the OTLP tests: the web tests' fixtures."""

from tests.web.conftest import api, sqlite_api, trust_file  # noqa: F401 (fixtures)
