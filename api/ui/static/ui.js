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
