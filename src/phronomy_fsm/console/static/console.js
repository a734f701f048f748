// The phronomy-fsm console: keep a page current while workers run executions.
//
// A page that shows something live names, on <body>, a URL that answers
// {"value": "..."} (data-live-url), the value the page was rendered with
// (data-live-value) and its own address (data-canonical). Every second and a half
// the value is asked again; when it differs the page is replaced by a fresh copy of
// itself - unless the operator has started typing into a form, in which case a banner
// says the page is out of date (a form sent from it then shows the conflict: it carries
// the revision the page was rendered with). No framework, no inline script (the
// console's Content-Security-Policy forbids it).
(function () {
  "use strict";
  var body = document.body;
  var url = body.getAttribute("data-live-url");
  if (!url) { return; }
  var value = body.getAttribute("data-live-value");
  var canonical = body.getAttribute("data-canonical") || window.location.pathname;
  var dirty = false;
  var stopped = false;
  document.addEventListener("input", function () { dirty = true; }, true);
  document.addEventListener("submit", function () { stopped = true; }, true);

  function outOfDate() {
    var banner = document.getElementById("live-banner");
    if (banner) { banner.hidden = false; }
  }

  function poll() {
    if (stopped) { return; }
    if (document.hidden) { window.setTimeout(poll, 1500); return; }
    fetch(url, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (data) {
        if (stopped) { return; }
        if (data && typeof data.value === "string" && data.value !== value) {
          if (dirty) { outOfDate(); return; }
          stopped = true;
          window.location.replace(canonical);
          return;
        }
        window.setTimeout(poll, 1500);
      })
      .catch(function () { window.setTimeout(poll, 3000); });
  }
  window.setTimeout(poll, 1500);
}());
