// The dashboard's only script beside htmx: the API token (kept for this tab only) goes with every change,
// and answers with an error status are shown where the result would go.
(function () {
  const KEY = "laketide-api-token";
  // each element says where its answer goes: a row inside a panel that swaps itself whole must not
  // inherit that panel's outerHTML swap
  htmx.config.disableInheritance = true;
  htmx.config.responseHandling = [
    { code: "204", swap: false },
    { code: "[23]..", swap: true },
    { code: "[45]..", swap: true, error: true },
    { code: "...", swap: false },
  ];
  document.addEventListener("htmx:configRequest", function (event) {
    const token = sessionStorage.getItem(KEY);
    if (token && event.detail.verb !== "get") {
      event.detail.headers["Authorization"] = "Bearer " + token;
    }
  });
  document.addEventListener("DOMContentLoaded", function () {
    const input = document.getElementById("token");
    input.value = sessionStorage.getItem(KEY) || "";
    input.addEventListener("input", function () {
      if (input.value) sessionStorage.setItem(KEY, input.value);
      else sessionStorage.removeItem(KEY);
    });
  });
  // A panel that polls keeps what it showed and keeps polling when a refresh fails: the error (the server's
  // fragment, or that it did not answer) is said in a note at the panel's top, gone with the next good answer.
  function polls(elt) {
    return elt && /\bevery\b/.test(elt.getAttribute("hx-trigger") || "");
  }
  function note(elt, html) {
    let box = elt.querySelector(":scope > .panel-error");
    if (!box) {
      box = document.createElement("div");
      box.className = "panel-error";
      box.setAttribute("role", "status");
      elt.prepend(box);
    }
    box.innerHTML = html;
  }
  document.addEventListener("htmx:beforeSwap", function (event) {
    if (event.detail.isError && polls(event.detail.elt)) {
      event.detail.shouldSwap = false;
      const body = event.detail.xhr.responseText || "";
      note(event.detail.elt, body.startsWith("<p class=\"error\"") ? body
        : '<p class="error" role="alert"><b>failed</b> the refresh answered ' + event.detail.xhr.status + "; showing the last answer</p>");
    }
  });
  // a refresh the server never answers (a request stuck behind a busy writer) would hold the panel's next
  // polls back for good, since htmx sends one request per element at a time: it is given up after POLL_TIMEOUT
  const POLL_TIMEOUT = 15000;
  document.addEventListener("htmx:configRequest", function (event) {
    if (polls(event.detail.elt)) event.detail.timeout = POLL_TIMEOUT;
  });
  function unanswered(event) {
    if (polls(event.detail.elt)) {
      note(event.detail.elt, '<p class="error" role="alert"><b>unavailable</b> the server did not answer (has the job stopped?); ' +
        "showing the last answer and trying again</p>");
    }
  }
  document.addEventListener("htmx:sendError", unanswered);
  document.addEventListener("htmx:timeout", unanswered);
  // the selected instant stays marked when the timeline refreshes
  let selected = null;
  document.addEventListener("click", function (event) {
    const row = event.target.closest("tr.instant");
    if (row) selected = row.dataset.instant;
  });
  document.addEventListener("htmx:afterSwap", function () {
    document.querySelectorAll("tr.instant").forEach(function (row) {
      row.classList.toggle("selected", row.dataset.instant === selected);
    });
  });
})();
