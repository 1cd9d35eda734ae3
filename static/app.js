// handoff-trace dashboard: the few behaviours the pages need, in one static file (the CSP
// allows no inline script). Nothing here builds HTML from data: text goes in with
// textContent, figures come from JSON in data attributes, and links only to /hops/DIGEST.
(function () {
  "use strict";

  function csrfToken() {
    var meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.getAttribute("content") : null;
  }

  // --- htmx: the CSRF token on every request, errors shown as text -------------------------
  document.addEventListener("htmx:configRequest", function (event) {
    var token = csrfToken();
    if (token) event.detail.headers["X-CSRF-Token"] = token;
  });

  function messageOf(xhr) {
    var text = xhr.responseText || "";
    try {
      var body = JSON.parse(text);
      if (body && body.error && typeof body.error.message === "string") return body.error.message;
    } catch (e) { /* not JSON: an HTML error page */ }
    var doc = new DOMParser().parseFromString(text, "text/html");
    var alert = doc.querySelector('[role="alert"]');
    return alert ? alert.textContent.trim() : "The request failed (HTTP " + xhr.status + ").";
  }

  document.addEventListener("htmx:responseError", function (event) {
    var target = document.getElementById("upload-message") || null;
    var text = messageOf(event.detail.xhr);
    if (target) {
      target.textContent = text;
      target.className = "alert-inline";
    } else {
      window.alert(text);
    }
  });

  // --- upload: size check before sending, progress while sending --------------------------
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!(form instanceof HTMLFormElement) || form.id !== "upload") return;
    var input = form.querySelector('input[type="file"]');
    var max = parseInt(form.getAttribute("data-max-bytes") || "0", 10);
    var message = document.getElementById("upload-message");
    if (input && input.files && input.files[0] && max && input.files[0].size > max) {
      event.preventDefault();
      event.stopImmediatePropagation();
      message.textContent = "This file is " + input.files[0].size + " octets; the most one upload may be is " + max + " octets.";
      message.className = "alert-inline";
    }
  }, true);

  document.addEventListener("htmx:beforeRequest", function (event) {
    if (event.detail.elt && event.detail.elt.id === "upload") {
      var bar = document.getElementById("progress");
      var message = document.getElementById("upload-message");
      bar.hidden = false;
      bar.value = 0;
      message.textContent = "Uploading…";
      message.className = "muted";
    }
  });
  document.addEventListener("htmx:xhr:progress", function (event) {
    var bar = document.getElementById("progress");
    if (bar && event.detail.lengthComputable) {
      bar.value = Math.round((100 * event.detail.loaded) / event.detail.total);
      if (event.detail.loaded >= event.detail.total) {
        document.getElementById("upload-message").textContent = "Verifying…";
      }
    }
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    if (event.detail.elt && event.detail.elt.id === "upload") {
      document.getElementById("progress").hidden = true;
      var message = document.getElementById("upload-message");
      if (event.detail.successful) message.textContent = "";
    }
  });

  // --- Plotly figures from data-figure ------------------------------------------------------
  var HOP_URL = /^\/hops\/[A-Za-z0-9_-]{43}$/;

  function drawPlot(el) {
    if (el.getAttribute("data-drawn") || typeof window.Plotly === "undefined") return;
    el.setAttribute("data-drawn", "1");
    var figure = JSON.parse(el.getAttribute("data-figure"));
    var style = getComputedStyle(document.body);
    var layout = figure.layout || {};
    layout.font = layout.font || {};
    layout.font.color = style.color;
    var grid = style.getPropertyValue("--grid").trim() || "#e5e7eb";
    ["xaxis", "yaxis", "yaxis2"].forEach(function (axis) {
      if (layout[axis]) {
        layout[axis].gridcolor = grid;
        layout[axis].zerolinecolor = grid;
      }
    });
    // On a phone a legend under the plot wraps into several lines; a figure of fixed height
    // then draws it over its own rows. Give the legend room of its own below the plot.
    if (el.clientWidth < 640 && layout.height && layout.legend && layout.legend.orientation === "h") {
      var entries = figure.data.filter(function (t) { return t.showlegend !== false; }).length;
      var room = 24 * Math.ceil(entries / 2);
      layout.height += room;
      layout.margin = layout.margin || {};
      layout.margin.b = (layout.margin.b || 40) + room;
      layout.legend = { orientation: "h", yref: "container", y: 0, yanchor: "bottom", x: 0 };
      // Few level dates rather than many turned ones, which took the rows' height.
      if (layout.xaxis && layout.xaxis.type === "date") { layout.xaxis.nticks = 3; layout.xaxis.tickangle = 0; }
    }
    window.Plotly.newPlot(el, figure.data, layout, { displayModeBar: false, responsive: true });
    el.on("plotly_click", function (data) {
      var url = data && data.points && data.points[0] && data.points[0].customdata;
      if (typeof url === "string" && HOP_URL.test(url)) window.location.assign(url);
    });
  }

  function setUp(root) {
    root.querySelectorAll(".plot[data-figure]").forEach(drawPlot);
  }

  // --- copy buttons --------------------------------------------------------------------------
  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("button[data-copy]") : null;
    if (!button) return;
    var source = document.querySelector(button.getAttribute("data-copy"));
    if (!source || !navigator.clipboard) return;
    navigator.clipboard.writeText(source.textContent).then(function () {
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = "Copy"; }, 1500);
    });
  });

  // --- triage: select all, keyboard shortcuts ------------------------------------------------
  document.addEventListener("change", function (event) {
    if (event.target.matches && event.target.matches("input.all")) {
      var table = event.target.closest("table");
      table.querySelectorAll('input[name="ids"], input[name="groups"]').forEach(function (box) {
        box.checked = event.target.checked;
      });
    }
  });

  function pick(row) {
    return row.querySelector('input[name="ids"], input[name="groups"]');
  }

  // The cursor the server asked for (?at=N after an action): the row now in that place.
  function restoreCursor() {
    var table = document.querySelector("table.triage[data-at]");
    if (!table) return;
    var all = rows();
    var index = parseInt(table.getAttribute("data-at"), 10);
    table.removeAttribute("data-at");
    if (!all.length || isNaN(index)) return;
    all.forEach(function (row) { row.classList.remove("current"); });
    all[Math.min(index, all.length - 1)].classList.add("current");
  }

  // --- triage: unfold a group of similar flags under its row ----------------------------
  document.addEventListener("click", function (event) {
    var link = event.target.closest ? event.target.closest("a.similar[data-similar]") : null;
    if (!link || !window.htmx) return;
    event.preventDefault();
    var row = link.closest("tr");
    if (link.getAttribute("aria-expanded") === "true") {
      var next = row.nextElementSibling;
      while (next && next.classList.contains("member")) {
        var gone = next;
        next = next.nextElementSibling;
        gone.remove();
      }
      link.setAttribute("aria-expanded", "false");
      return;
    }
    link.setAttribute("aria-expanded", "true");
    window.htmx.ajax("GET", link.getAttribute("data-similar"), { target: row, swap: "afterend" });
  });

  // --- a dialog's tree: fold locally, unfold by fragment, the open nodes kept in the URL ------
  function openNodes() {
    var params = new URLSearchParams(window.location.search);
    var text = params.get("open");
    return text ? text.split(",") : [];
  }
  function keepOpen(node, isOpen) {
    var params = new URLSearchParams(window.location.search);
    var list = openNodes().filter(function (n) { return n !== node; });
    if (isOpen) list.push(node);
    if (list.length) params.set("open", list.join(",")); else params.delete("open");
    params.delete("toggle");
    var query = params.toString();
    window.history.replaceState(null, "", window.location.pathname + (query ? "?" + query : "") + window.location.hash);
  }
  document.addEventListener("click", function (event) {
    var link = event.target.closest ? event.target.closest("ul.tree a.tog[data-node], ul.tree a.more-link[data-more]") : null;
    if (!link || !window.htmx) return;
    var wrap = link.closest(".tree-wrap");
    if (!wrap) return;
    event.preventDefault();
    if (link.classList.contains("more-link")) {
      var item = link.closest("li");
      window.htmx.ajax("GET", link.getAttribute("data-more"), { target: item, swap: "outerHTML" });
      return;
    }
    var li = link.closest("li");
    var node = link.getAttribute("data-node");
    var expanded = link.getAttribute("aria-expanded") === "true";
    var list = li.querySelector(":scope > ul");
    if (expanded) {
      li.classList.add("folded");
      link.setAttribute("aria-expanded", "false");
      link.textContent = "▸";
      keepOpen(node, false);
      return;
    }
    link.setAttribute("aria-expanded", "true");
    link.textContent = "▾";
    keepOpen(node, true);
    if (list) { li.classList.remove("folded"); return; }
    var url = "/dialog-tree?dialog=" + encodeURIComponent(wrap.getAttribute("data-dialog")) +
      "&node=" + encodeURIComponent(node);
    var q = wrap.getAttribute("data-q");
    if (q) url += "&q=" + encodeURIComponent(q);
    var below = li.querySelector(":scope > .row .below");
    if (below) below.remove();
    window.htmx.ajax("GET", url, { target: li, swap: "beforeend" });
  });
  // A search opens the paths to its matches: bring the first into view.
  document.addEventListener("DOMContentLoaded", function () {
    var first = document.querySelector(".tree-wrap li.match");
    if (first && !window.location.hash) first.scrollIntoView({ block: "center" });
  });

  function rows() {
    return Array.prototype.slice.call(document.querySelectorAll("table.triage tr.row"));
  }

  function move(step) {
    var all = rows();
    if (!all.length) return;
    var index = all.findIndex(function (row) { return row.classList.contains("current"); });
    var next = Math.min(Math.max(index + step, 0), all.length - 1);
    if (index >= 0) all[index].classList.remove("current");
    all[next].classList.add("current");
    all[next].scrollIntoView({ block: "nearest" });
  }

  // --- keyboard shortcuts (the ? list in templates/base.html and each page's block) -------
  // An element with data-key="K" is clicked by K; one with data-key-focus="K" takes the
  // focus. On the queue they are looked up in the current row first, and an action key
  // with rows ticked goes to the bulk form instead, so a selection is never thrown away.
  function selected() {
    return Array.prototype.slice.call(document.querySelectorAll('input[form="bulk"]:checked'));
  }

  function bulkDo(action, focus) {
    var form = document.getElementById("bulk");
    var select = form && form.querySelector('select[name="action"]');
    if (!select) return false;
    select.value = action;
    showFields(form);
    // The cursor's place travels with the form, so the queue comes back with the cursor
    // on the row that took the first acted-on one's place.
    var at = form.querySelector('input[name="at"]');
    var current = document.querySelector("table.triage tr.row.current");
    if (at && current) at.value = String(rows().indexOf(current));
    if (focus) {
      var field = form.querySelector(focus);
      if (field) { field.focus(); return true; }
    }
    form.requestSubmit();
    return true;
  }

  function openMenu(row, name) {
    var menu = row.querySelector("details." + name);
    if (!menu) return false;
    document.querySelectorAll("details.menu[open]").forEach(function (m) { if (m !== menu) m.open = false; });
    menu.open = true;
    var field = menu.querySelector("input:not([type=hidden]), textarea, button");
    if (field) field.focus();
    return true;
  }

  function queueKey(key, current) {
    var ticked = selected().length > 0;
    if (ticked) {
      if (key === "a") return bulkDo("acknowledge");
      if (key === "r") return bulkDo("resolve", 'input[name="note"]');
      if (key === "s") return bulkDo("snooze", 'select[name="preset"]');
      if (key === "g") return bulkDo("assign", 'select[name="assignee"]');
      if (key === "m") {
        var me = document.querySelector('meta[name="username"]');
        var who = document.querySelector('#bulk select[name="assignee"]');
        if (!me || !who) return false;
        who.value = me.getAttribute("content");
        return bulkDo("assign");
      }
    }
    if (key === "e") {
      var form = document.getElementById("bulk");
      if (form && form.querySelector('select[name="action"]')) { form.requestSubmit(); return true; }
      return false;
    }
    if (key === "g") return bulkDo("assign", 'select[name="assignee"]');
    if (!current) return false;
    if (key === "r") return openMenu(current, "q-resolve");
    if (key === "s") return openMenu(current, "q-snooze");
    var target = current.querySelector('[data-key="' + key + '"]');
    if (target) { target.click(); return true; }
    return false;
  }

  function pageKey(key) {
    var focusing = document.querySelector('[data-key-focus="' + key + '"]');
    if (focusing) {
      var details = focusing.closest("details");
      if (details) details.open = true;
      focusing.focus();
      return true;
    }
    var candidates = document.querySelectorAll('[data-key="' + key + '"]');
    for (var i = 0; i < candidates.length; i++) {
      var el = candidates[i];
      if (el.closest("table.triage")) continue;  // a row's keys act through queueKey
      var within = el.getAttribute("data-key-scope");
      // A digit picks a snooze preset only once s has put the focus in its group.
      if (within && !(document.activeElement && document.activeElement.closest(within))) continue;
      el.click();
      return true;
    }
    return false;
  }

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) {
      // Ctrl+Enter in a field sends its form (a resolve note, the bulk form).
      if ((event.ctrlKey || event.metaKey) && event.key === "Enter" && event.target.form) {
        event.preventDefault();
        event.target.form.requestSubmit();
      }
      return;
    }
    var tag = (event.target.tagName || "").toLowerCase();
    if (event.key === "Escape") {
      var open = document.querySelectorAll("details.menu[open]");
      open.forEach(function (m) { m.open = false; });
      if (tag === "input" || tag === "textarea" || tag === "select") event.target.blur();
      return;
    }
    if (tag === "input" || tag === "textarea" || tag === "select" || event.target.isContentEditable) return;
    var help = document.getElementById("keys-help");
    if (help && help.open) return;
    if (event.key === "/") {
      var search = document.querySelector('form.search input[name="q"]');
      if (search) { event.preventDefault(); search.focus(); }
      return;
    }
    if (event.key === "?") {
      if (help && help.showModal) { event.preventDefault(); help.showModal(); }
      return;
    }
    // A digit inside an open row menu picks its preset.
    var menu = event.target.closest ? event.target.closest("details.menu[open]") : null;
    if (menu && /^[1-9]$/.test(event.key) && menu.closest("table.triage")) {
      var preset = menu.querySelector('[data-key="' + event.key + '"]');
      if (preset) { event.preventDefault(); preset.click(); }
      return;
    }
    var current = document.querySelector("table.triage tr.row.current");
    var key = event.key;
    var done = false;
    if (document.querySelector("table.triage")) {
      if (key === "j") { move(1); done = true; }
      else if (key === "k") { move(-1); done = true; }
      else if (key === "x" && current) {
        var box = pick(current);
        if (box) box.checked = !box.checked;
        done = true;
      } else if ((key === "o" || key === "Enter") && current) {
        window.location.assign(current.getAttribute("data-href"));
        done = true;
      } else if ("arsmge".indexOf(key) >= 0 && key.length === 1) {
        done = queueKey(key, current);
      }
    } else if (key.length === 1) {
      done = pageKey(key);
    }
    if (done) event.preventDefault();
  });

  // A row's one-click form says where the cursor was, so the queue comes back with the
  // cursor on the row that took the acted-on one's place.
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var row = form.closest ? form.closest("table.triage tr.row") : null;
    if (!row) return;
    var at = form.querySelector('input[name="at"]');
    if (!at) {
      at = document.createElement("input");
      at.type = "hidden";
      at.name = "at";
      form.appendChild(at);
    }
    at.value = String(rows().indexOf(row));
  });

  // --- triage: the bulk form shows only the fields of the chosen action ------------------
  function showFields(form) {
    var select = form.querySelector('select[name="action"]');
    if (!select) return;
    form.querySelectorAll("[data-for]").forEach(function (field) {
      var wanted = field.getAttribute("data-for").split(" ");
      field.hidden = wanted.indexOf(select.value) < 0;
    });
  }
  document.addEventListener("change", function (event) {
    if (event.target.matches && event.target.matches('#bulk select[name="action"]')) {
      showFields(event.target.form);
    }
  });
  document.addEventListener("DOMContentLoaded", function () {
    var form = document.getElementById("bulk");
    if (form) showFields(form);
    // On a phone the queue comes first: the filters fold away (one tap brings them back).
    var box = document.querySelector("details.filter-box");
    if (box && window.matchMedia("(max-width: 640px)").matches) box.open = false;
  });

  // --- triage: the live queue keeps what the operator ticked and where the cursor is -------
  var kept = null;
  document.addEventListener("htmx:beforeRequest", function (event) {
    var elt = event.detail.elt;
    if (!elt || !elt.classList || !elt.classList.contains("live")) return;
    // An unfolded group or a half-typed bulk form: do not pull rows out from under it.
    var busy = document.querySelector('a.similar[aria-expanded="true"]') ||
      document.querySelector("table.triage details.menu[open]") ||
      (document.activeElement && document.activeElement.closest && document.activeElement.closest("#bulk fieldset"));
    if (busy) event.preventDefault();
  });
  document.addEventListener("htmx:beforeSwap", function (event) {
    if (!event.detail.target || event.detail.target.id !== "queue_rows") return;
    var current = document.querySelector("table.triage tr.row.current");
    kept = {
      current: current ? current.getAttribute("data-id") : null,
      checked: Array.prototype.map.call(
        document.querySelectorAll('#queue_rows input[type="checkbox"]:checked'),
        function (box) { return box.name + "=" + box.value; })
    };
  });
  document.addEventListener("htmx:afterSwap", function () {
    if (!kept) return;
    var state = kept;
    kept = null;
    rows().forEach(function (row) {
      if (state.current && row.getAttribute("data-id") === state.current) row.classList.add("current");
      var box = pick(row);
      if (box && state.checked.indexOf(box.name + "=" + box.value) >= 0) box.checked = true;
    });
  });

  document.addEventListener("DOMContentLoaded", restoreCursor);
  document.addEventListener("htmx:afterSettle", restoreCursor);

  if (window.htmx) {
    window.htmx.onLoad(setUp);
  } else {
    document.addEventListener("DOMContentLoaded", function () { setUp(document); });
  }
  window.addEventListener("load", function () { setUp(document); });
})();
