// Criogen dashboard: the live indicator, keeping selections across live swaps, and
// keyboard shortcuts. No build step; htmx and its ws extension do the rest.
(function () {
  "use strict";

  // -- live indicator ---------------------------------------------------------------
  function live(on, text) {
    var el = document.getElementById("live-status");
    if (!el) return;
    el.hidden = false;
    el.textContent = text;
    el.classList.toggle("off", !on);
    document.body.dataset.live = on ? "open" : "closed";
  }
  document.addEventListener("htmx:wsOpen", function () { live(true, "live"); });
  // The server closes a page's socket for good (the extension does not reconnect on
  // these codes) when its session ended (4401: sign-out, expiry, deactivation), the
  // user's rights changed (4403) or the thread is no longer visible (4404).
  var ENDED = {
    4401: "Signed out: live updates stopped. Sign in again",
    4403: "Your access changed: reload the page",
    4404: "This thread is no longer visible to you"
  };
  document.addEventListener("htmx:wsClose", function (ev) {
    var code = ev.detail && ev.detail.event ? ev.detail.event.code : 0;
    if (!ENDED[code]) {
      // A page has several sockets: once one of them was ended for good (signed out),
      // another closing after it must not turn the notice back into "reconnecting".
      if (document.body.dataset.live !== "ended") live(false, "reconnecting…");
      return;
    }
    live(false, "");
    document.body.dataset.live = "ended";
    document.body.dataset.liveClosed = String(code);
    var el = document.getElementById("live-status");
    if (!el) return;
    var link = document.createElement("a");
    link.textContent = ENDED[code];
    link.href = code === 4401
      ? "/accounts/login/?next=" + encodeURIComponent(location.pathname + location.search)
      : location.href;
    el.appendChild(link);
    el.setAttribute("role", "alert");
  });
  // The ws extension's default waits up to 64 s between attempts, so a page could stay
  // stale for a minute after the server or its Redis is back. At most 5 s, jittered so
  // that many pages do not all reconnect at once; each reconnect re-syncs the page.
  if (window.htmx) {
    htmx.config.wsReconnectDelay = function (retry) {
      return Math.min(5000, 500 * Math.pow(2, retry)) * (0.5 + Math.random() / 2);
    };
  }

  // -- a request that fails says so, next to what sent it ------------------------------
  // htmx swaps nothing for a 4xx/5xx answer (the htmx-config meta in base.html) and
  // nothing when the server cannot be reached, so the form keeps what was typed; without
  // these handlers the page said nothing at all. The message goes right before the form
  // (or the element) that made the request, in a role="alert" paragraph that screen
  // readers announce, and is removed when that form sends again.
  function detailOf(xhr) {
    // The REST API's and the body-size guard's problem+json carry a readable detail.
    try {
      var type = xhr.getResponseHeader("Content-Type") || "";
      if (type.indexOf("json") !== -1) return JSON.parse(xhr.responseText).detail || "";
      if (type.indexOf("text/plain") === 0) return xhr.responseText.slice(0, 500);
    } catch (e) { /* not JSON: fall back to the status */ }
    return "";
  }
  function problemText(xhr) {
    var status = xhr ? xhr.status : 0;
    var detail = xhr ? detailOf(xhr) : "";
    var kept = " What you typed is still here.";
    if (status === 403) {
      return "Refused (403): you may not do this any more (your permission changed, or the page's security token is stale). Reload the page and try again." + kept;
    }
    if (status === 413) {
      return "Too large (413): " + (detail || "the request is larger than the server accepts") + ". Shorten it and try again." + kept;
    }
    if (status === 404) return "Not found (404): it may have been deleted. Reload the page." + kept;
    if (status === 429) return "Too many requests (429): wait a moment and try again." + kept;
    if (status >= 500) {
      return "The server failed (" + status + "); the change may not have been made. Reload the page to see where things stand, then try again." + kept;
    }
    if (status >= 400) return (detail || "The request was refused (" + status + ").") + kept;
    return "The server could not be reached (network down or server stopped). Try again when it is back." + kept;
  }
  function anchorOf(elt) {
    if (!elt || !elt.closest) return null;
    return elt.closest("form") || elt;
  }
  function showProblem(elt, text) {
    var anchor = anchorOf(elt);
    if (!anchor || !anchor.isConnected) anchor = document.querySelector("main");
    var note = anchor.previousElementSibling;
    if (!note || !note.hasAttribute("data-request-error")) {
      note = document.createElement("p");
      note.className = "flash error request-error";
      note.setAttribute("role", "alert");
      note.setAttribute("data-request-error", "");
      anchor.parentNode.insertBefore(note, anchor);
    }
    note.textContent = text;
    return note;
  }
  var problems = 0;
  // A refusal that names a field (the X-Criogen-Field header of a plain-text 422)
  // marks that field aria-invalid and points it at the message.
  function markField(elt, name, note) {
    var form = anchorOf(elt);
    var field = form && name && form.querySelector('[name="' + CSS.escape(name) + '"]');
    if (!field || !note) return;
    if (!note.id) note.id = "request-error-" + (++problems);
    field.setAttribute("aria-invalid", "true");
    field.setAttribute("aria-describedby", note.id);
    field.setAttribute("data-marked-invalid", "");
  }
  function clearProblem(elt) {
    var anchor = anchorOf(elt);
    var note = anchor && anchor.previousElementSibling;
    if (note && note.hasAttribute("data-request-error")) note.remove();
    if (anchor && anchor.querySelectorAll) {
      anchor.querySelectorAll("[data-marked-invalid]").forEach(function (field) {
        field.removeAttribute("aria-invalid");
        field.removeAttribute("aria-describedby");
        field.removeAttribute("data-marked-invalid");
      });
    }
  }
  document.addEventListener("htmx:beforeRequest", function (ev) { clearProblem(ev.detail.elt); });
  document.addEventListener("htmx:responseError", function (ev) {
    showProblem(ev.detail.elt, problemText(ev.detail.xhr));
  });
  document.addEventListener("htmx:sendError", function (ev) { showProblem(ev.detail.elt, problemText(null)); });
  document.addEventListener("htmx:timeout", function (ev) { showProblem(ev.detail.elt, problemText(null)); });
  // An action's answer can arrive after a live update (sent when the action committed)
  // replaced its target, #actions say: it goes into the element of that id the page
  // has now, not into the detached one the request started from, where its outcome
  // would never be seen.
  document.addEventListener("htmx:beforeSwap", function (ev) {
    var target = ev.detail.target;
    if (!target || !target.id || document.contains(target)) return;
    var now = document.getElementById(target.id);
    if (now) ev.detail.target = now;
  });
  // A 422 in plain text is a refusal of what was typed with nothing to re-render (an
  // inbox card's reason): show it by the form and leave the form as it is.
  document.addEventListener("htmx:beforeSwap", function (ev) {
    var xhr = ev.detail.xhr;
    if (xhr.status === 422 && (xhr.getResponseHeader("Content-Type") || "").indexOf("text/plain") === 0) {
      ev.detail.shouldSwap = false;
      // This event's detail.elt is the swap target; the form that sent it is here.
      var sender = ev.detail.requestConfig ? ev.detail.requestConfig.elt : ev.detail.elt;
      var note = showProblem(sender, xhr.responseText + " What you typed is still here.");
      markField(sender, xhr.getResponseHeader("X-Criogen-Field"), note);
    }
  });

  // -- keep what the operator selected or typed when the server re-renders a list --------
  var saved = null;
  document.addEventListener("htmx:wsBeforeMessage", function () {
    saved = { checked: [], typed: {} };
    document.querySelectorAll("#inbox-list input[type=checkbox]:checked").forEach(function (el) {
      saved.checked.push(el.value);
    });
    saved.problems = {};
    document.querySelectorAll("#inbox-list [data-thread]").forEach(function (card) {
      var reason = card.querySelector("[data-reason]");
      if (reason && reason.value) saved.typed[card.dataset.thread] = reason.value;
      var problem = card.querySelector("[data-request-error]");
      var marked = card.querySelector("[data-marked-invalid]");
      if (problem) saved.problems[card.dataset.thread] = [problem.textContent, marked ? marked.name : null];
    });
    // The j/k selection: an inbox card (by thread) or a timeline row (by version).
    var focused = document.querySelector(".card.waiting.focus, .timeline li.cp.focus");
    saved.focus = !focused ? null : focused.dataset.thread
      ? '#inbox-list [data-thread="' + CSS.escape(focused.dataset.thread) + '"]'
      : '.timeline li.cp[data-version="' + CSS.escape(focused.dataset.version || "") + '"]';
    saved.hadFocus = !!focused && (document.activeElement === focused || focused.contains(document.activeElement));
  });
  document.addEventListener("htmx:wsAfterMessage", function () {
    document.body.dataset.liveMessages = String(Number(document.body.dataset.liveMessages || 0) + 1);
    if (!saved) return;
    saved.checked.forEach(function (value) {
      var box = document.querySelector('#inbox-list input[type=checkbox][value="' + CSS.escape(value) + '"]');
      if (box) box.checked = true;
    });
    Object.keys(saved.typed).forEach(function (tid) {
      var card = document.querySelector('#inbox-list [data-thread="' + CSS.escape(tid) + '"]');
      var reason = card && card.querySelector("[data-reason]");
      if (reason) reason.value = saved.typed[tid];
    });
    Object.keys(saved.problems).forEach(function (tid) {
      var card = document.querySelector('#inbox-list [data-thread="' + CSS.escape(tid) + '"]');
      var form = card && card.querySelector("form");
      if (!form) return;
      var note = showProblem(form, saved.problems[tid][0]);
      markField(form, saved.problems[tid][1], note);
    });
    if (saved.focus) {
      var again = document.querySelector(saved.focus);
      if (again && !again.classList.contains("focus")) select(again, saved.hadFocus);
    }
    saved = null;
  });

  // -- the decision panel keeps what was typed across a live swap ---------------------------
  // A live update re-renders #actions (the thread moved, or the socket's first sync).
  // When it still answers the same suspension (same "expected" checkpoint), what the
  // operator had typed, chosen or opened comes back, and so does the focus. The outcome
  // of the operator's last action ("Cancel requested…") stays too: the update its own
  // action caused would otherwise wipe it out before it was read.
  var panel = null;
  var before = null;
  document.addEventListener("htmx:wsBeforeMessage", function () {
    var actions = document.getElementById("actions");
    var expected = actions && actions.querySelector("input[name=expected]");
    var flash = actions && actions.querySelector(":scope > .flash[role=status]");
    before = actions ? { actions: actions, flash: flash } : null;
    panel = null;
    if (!expected) return;
    panel = { expected: expected.value, values: {}, checked: [], open: [], focus: null };
    actions.querySelectorAll("input, textarea, select").forEach(function (el) {
      if (!el.name || el.type === "hidden") return;
      if (el.type === "radio" || el.type === "checkbox") {
        if (el.checked !== el.defaultChecked) panel.checked.push([el.name, el.value, el.checked]);
      } else if (el.tagName === "SELECT" || el.value !== el.defaultValue) {
        panel.values[el.name] = el.value;
      }
    });
    actions.querySelectorAll("details[open]").forEach(function (d, i) { panel.open.push(i); });
    if (document.activeElement && actions.contains(document.activeElement)) panel.focus = document.activeElement.name || null;
  });
  document.addEventListener("htmx:wsAfterMessage", function () {
    var saved = panel;
    var was = before;
    panel = null;
    before = null;
    var actions = document.getElementById("actions");
    if (was && was.flash && actions && actions !== was.actions &&
        !actions.querySelector(":scope > .flash[role=status]")) {
      actions.insertBefore(was.flash, actions.firstChild);
    }
    var expected = actions && actions.querySelector("input[name=expected]");
    if (!saved || !expected || expected.value !== saved.expected) return;
    Object.keys(saved.values).forEach(function (name) {
      var el = actions.querySelector('[name="' + CSS.escape(name) + '"]:not([type=hidden])');
      if (el) el.value = saved.values[name];
    });
    saved.checked.forEach(function (item) {
      var el = actions.querySelector('[name="' + CSS.escape(item[0]) + '"][value="' + CSS.escape(item[1]) + '"]');
      if (el) el.checked = item[2];
    });
    var details = actions.querySelectorAll("details");
    saved.open.forEach(function (i) { if (details[i]) details[i].open = true; });
    if (saved.focus) {
      var el = actions.querySelector('[name="' + CSS.escape(saved.focus) + '"]');
      if (el) el.focus();
    }
  });

  // -- the checkpoint panel follows the head it showed ------------------------------------
  // The panel shows one checkpoint. While it shows the head (as on load, or after the
  // operator picked the head), each new head a live update brings is loaded into it; a
  // checkpoint picked by hand, or a rewind confirmation, stays put. Answers can arrive
  // out of order, so only the newest wanted one is swapped in.
  function headLink() {
    var timeline = document.getElementById("timeline");
    var row = timeline && timeline.querySelector('li.cp[data-version="' + timeline.dataset.head + '"]');
    return row ? row.querySelector("a.v") : null;
  }
  function panelShows(link) {
    var shown = document.getElementById("panel");
    return !!(shown && link && shown.dataset.checkpoint &&
      link.getAttribute("hx-get").indexOf("/" + shown.dataset.checkpoint + "/") !== -1);
  }
  var follows = panelShows(headLink());
  var wanted = null;
  document.addEventListener("click", function (ev) {
    if (!ev.target.closest) return;
    var picked = ev.target.closest(".timeline a.v");
    if (picked) { follows = picked === headLink(); wanted = null; }
    if (ev.target.closest(".timeline a.rewind")) { follows = false; wanted = null; }
  }, true);
  document.addEventListener("htmx:wsAfterMessage", function () {
    var link = headLink();
    if (!follows || !link || !window.htmx || panelShows(link)) return;
    var url = link.getAttribute("hx-get");
    if (url === wanted) return;
    wanted = url;
    htmx.ajax("GET", url, { target: "#panel", swap: "outerHTML" });
  });
  document.addEventListener("htmx:beforeSwap", function (ev) {
    if (!wanted || !ev.detail.target || ev.detail.target.id !== "panel") return;
    var path = ev.detail.pathInfo ? ev.detail.pathInfo.requestPath : "";
    if (path && path !== wanted) { ev.detail.shouldSwap = !follows; return; }
    if (path === wanted) wanted = null;
  });

  // -- ages tick, and turn late -----------------------------------------------------------
  // The server renders each age as <time class="age" data-age="seconds at render">; a
  // live swap brings new ones. Each is counted on from the moment this script first saw
  // it (the browser's clock, so a server clock that differs does not matter), formatted
  // as the server's `age` filter does, and gets the class "late" (the warning colour)
  // once it passes its data-late-at.
  var firstSeen = new WeakMap();
  function formatAge(seconds) {
    if (seconds < 60) return seconds + "s";
    var minutes = Math.floor(seconds / 60);
    if (minutes < 60) return minutes + "m";
    var hours = Math.floor(minutes / 60);
    minutes = minutes % 60;
    if (hours < 24) return hours + "h " + (minutes < 10 ? "0" : "") + minutes + "m";
    return Math.floor(hours / 24) + "d " + (hours % 24) + "h";
  }
  function tickAges() {
    var now = Date.now();
    document.querySelectorAll("time.age[data-age]").forEach(function (el) {
      var base = firstSeen.get(el);
      if (base === undefined) {
        base = now - Number(el.dataset.age) * 1000;
        firstSeen.set(el, base);
      }
      var seconds = Math.max(0, Math.floor((now - base) / 1000));
      var text = formatAge(seconds);
      if (el.textContent !== text) el.textContent = text;
      if (el.dataset.lateAt !== undefined) {
        el.classList.toggle("late", seconds >= Number(el.dataset.lateAt));
      }
    });
  }
  tickAges();
  setInterval(tickAges, 1000);

  // -- the inbox's count in the page title follows the live list -----------------------
  function titleCount() {
    var list = document.getElementById("inbox-list");
    if (!list || list.dataset.total === undefined) return;
    var title = document.title.replace(/^Inbox \(\d+\)/, "Inbox (" + list.dataset.total + ")");
    if (title !== document.title) document.title = title;
  }
  // -- a JSON block that scrolls can be reached (and scrolled) with the keyboard ----------
  function reachable() {
    document.querySelectorAll("pre.json").forEach(function (pre) {
      var scrolls = pre.scrollHeight > pre.clientHeight + 1 || pre.scrollWidth > pre.clientWidth + 1;
      if (scrolls && !pre.hasAttribute("tabindex")) pre.setAttribute("tabindex", "0");
      if (!scrolls && pre.getAttribute("tabindex") === "0") pre.removeAttribute("tabindex");
    });
  }
  reachable();
  document.addEventListener("toggle", reachable, true);  // a <details> opened
  document.addEventListener("htmx:afterSettle", function () { titleCount(); tickAges(); reachable(); });
  document.addEventListener("htmx:wsAfterMessage", function () { titleCount(); tickAges(); reachable(); });

  // -- the timeline marks the checkpoint whose panel is shown -----------------------------
  document.addEventListener("click", function (ev) {
    var link = ev.target.closest && ev.target.closest(".timeline a.v");
    if (!link) return;
    document.querySelectorAll(".timeline li.selected").forEach(function (li) { li.classList.remove("selected"); });
    link.closest("li").classList.add("selected");
  });

  // -- keyboard shortcuts (press ? for the list) -------------------------------------
  function items() {
    return Array.prototype.slice.call(document.querySelectorAll(".card.waiting, .timeline li.cp"));
  }
  function current() { return document.querySelector(".card.waiting.focus, .timeline li.cp.focus"); }
  // The selection is real focus (screen readers follow it) and says so with
  // aria-current; the "focus" class keeps the highlight when focus goes to a button.
  function select(el, focus) {
    items().forEach(function (other) {
      if (other === el) return;
      other.classList.remove("focus");
      other.removeAttribute("aria-current");
    });
    el.classList.add("focus");
    el.setAttribute("aria-current", "true");
    if (focus !== false) el.focus({ preventScroll: true });
    el.scrollIntoView({ block: "nearest" });
  }
  function move(step) {
    var all = items();
    if (!all.length) return;
    var i = all.indexOf(current());
    var next = all[Math.max(0, Math.min(all.length - 1, i + step))] || all[0];
    select(next, true);
  }
  // On the inbox, actions apply only to the card selected with j/k (never "the first one").
  function scope() {
    var card = document.querySelector(".card.waiting.focus");
    if (card) return card;
    if (document.getElementById("inbox-list")) return null;
    return document.getElementById("actions") || document;
  }
  function click(selector) {
    var root = scope();
    var el = root && root.querySelector(selector);
    if (el) { el.click(); return true; }
    return false;
  }
  var pending = "";
  document.addEventListener("keydown", function (ev) {
    var t = ev.target;
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    if (t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT" || t.isContentEditable)) {
      if (ev.key === "Escape") t.blur();
      return;
    }
    // Enter on a focused link or button keeps its usual meaning.
    if (ev.key === "Enter" && t && (t.tagName === "A" || t.tagName === "BUTTON")) return;
    var key = ev.key;
    if (pending === "g") {
      pending = "";
      var go = { i: "/ui/inbox/", t: "/ui/threads/", a: "/ui/audit/" }[key];
      if (go) { window.location.href = go; ev.preventDefault(); }
      return;
    }
    switch (key) {
      case "g": pending = "g"; break;
      case "j": move(1); break;
      case "k": move(-1); break;
      case "o": case "Enter":
        var open = current() && current().querySelector("[data-open]");
        if (open) open.click(); else return;
        break;
      case "x": var box = current() && current().querySelector("input[type=checkbox]"); if (box) box.checked = !box.checked; break;
      case "a": if (!click("[data-approve]")) return; break;
      case "r": var reason = scope() && scope().querySelector("[data-reason]"); if (reason) reason.focus(); else return; break;
      case "e":
        var edit = scope() && scope().querySelector("details.edit");
        if (edit) { edit.open = true; var box2 = edit.querySelector("textarea"); if (box2) box2.focus(); } else return;
        break;
      case "/": var search = document.querySelector("[data-search]"); if (search) search.focus(); else return; break;
      case "?": var help = document.getElementById("keys-help"); if (help && help.showModal) help.showModal(); break;
      default: return;
    }
    ev.preventDefault();
  });
})();
