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
    if (!ENDED[code]) { live(false, "reconnecting…"); return; }
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

  // -- keep what the operator selected or typed when the server re-renders a list --------
  var saved = null;
  document.addEventListener("htmx:wsBeforeMessage", function () {
    saved = { checked: [], typed: {} };
    document.querySelectorAll("#inbox-list input[type=checkbox]:checked").forEach(function (el) {
      saved.checked.push(el.value);
    });
    document.querySelectorAll("#inbox-list [data-thread]").forEach(function (card) {
      var reason = card.querySelector("[data-reason]");
      if (reason && reason.value) saved.typed[card.dataset.thread] = reason.value;
    });
    var focused = document.querySelector(".card.waiting.focus");
    saved.focus = focused ? focused.dataset.thread : null;
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
    if (saved.focus) {
      var card = document.querySelector('#inbox-list [data-thread="' + CSS.escape(saved.focus) + '"]');
      if (card) card.classList.add("focus");
    }
    saved = null;
  });

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
  function move(step) {
    var all = items();
    if (!all.length) return;
    var i = all.indexOf(current());
    var next = all[Math.max(0, Math.min(all.length - 1, i + step))] || all[0];
    all.forEach(function (el) { el.classList.remove("focus"); });
    next.classList.add("focus");
    next.scrollIntoView({ block: "nearest" });
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
