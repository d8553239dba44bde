// unstall's dashboard: fetch the page's data (server-rendered, escaped HTML fragments) now and
// every few seconds, and submit and cancel through the API. The token (or, where the service
// has no tokens, the user name) is kept in this browser and sent with every call.
(function () {
  "use strict";
  const body = document.body;
  const usesTokens = body.dataset.tokens === "1";
  const pollMs = Number(body.dataset.pollMs) || 2000;
  const TOKEN = "unstall.token";
  const USER = "unstall.user";
  let fetching = false;

  function headers(extra) {
    const sent = Object.assign({}, extra || {});
    const token = localStorage.getItem(TOKEN);
    const user = localStorage.getItem(USER);
    if (usesTokens && token) sent["Authorization"] = "Bearer " + token;
    if (!usesTokens && user) sent["X-Unstall-User"] = user;
    return sent;
  }

  // A message for the person: set as text, never as markup (it may quote what they typed).
  function say(text, kind) {
    const box = document.getElementById("message");
    box.textContent = text;
    box.className = kind || "info";
    box.hidden = !text;
  }

  async function detail(answer) {
    try {
      const sent = await answer.json();
      return typeof sent.detail === "string" ? sent.detail : JSON.stringify(sent.detail);
    } catch (_) {
      return answer.status + " " + answer.statusText;
    }
  }

  function showWho() {
    const now = document.getElementById("who-now");
    if (usesTokens) {
      now.textContent = localStorage.getItem(TOKEN) ? "signed in" : "a token is needed";
    } else {
      now.textContent = "as " + (localStorage.getItem(USER) || "anonymous");
    }
  }

  async function refresh() {
    const live = document.getElementById("live");
    if (!live || fetching || document.hidden) return;
    fetching = true;
    try {
      const answer = await fetch(live.dataset.fragment, { headers: headers() });
      if (answer.ok) {
        live.innerHTML = await answer.text();
        live.dataset.updated = String(Date.now());
        if (document.getElementById("message").className === "auth") say("");
      } else if (answer.status === 401) {
        say("This service needs a token: paste yours above and sign in.", "auth");
      } else {
        say(await detail(answer), "error");
      }
    } catch (error) {
      say("The service does not answer (" + error.message + "); trying again.", "error");
    } finally {
      fetching = false;
    }
  }

  async function call(method, url, payload) {
    const init = { method: method, headers: headers({ "Content-Type": "application/json" }) };
    if (payload !== undefined) init.body = JSON.stringify(payload);
    return fetch(url, init);
  }

  function spec(form) {
    const data = new FormData(form);
    const sent = { gpus: Number(data.get("gpus")), priority: Number(data.get("priority") || 0) };
    for (const field of ["name", "model"]) {
      const value = String(data.get(field) || "").trim();
      if (value) sent[field] = value;
    }
    sent[data.get("length_kind")] = Number(data.get("length"));
    const expected = String(data.get("expected_duration_s") || "").trim();
    if (expected) sent.expected_duration_s = Number(expected);
    return sent;
  }

  async function submit(event) {
    event.preventDefault();
    const answer = await call("POST", "/api/jobs", spec(event.target));
    if (answer.ok) {
      const job = await answer.json();
      say("Submitted " + job.id + " (" + job.name + ").", "ok");
      refresh();
    } else {
      say("Not submitted: " + (await detail(answer)), "error");
    }
  }

  async function cancel(jobId) {
    const answer = await call("POST", "/api/jobs/" + encodeURIComponent(jobId) + "/cancel");
    if (answer.ok) say("Cancelling " + jobId + ".", "ok");
    else say("Not cancelled: " + (await detail(answer)), "error");
    refresh();
  }

  function signIn(event) {
    event.preventDefault();
    const field = document.getElementById(usesTokens ? "who-token" : "who-user");
    const value = field.value.trim();
    if (value) localStorage.setItem(usesTokens ? TOKEN : USER, value);
    else localStorage.removeItem(usesTokens ? TOKEN : USER);
    field.value = "";
    showWho();
    say("");
    refresh();
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.getElementById("who").addEventListener("submit", signIn);
    const form = document.getElementById("submit");
    if (form) form.addEventListener("submit", submit);
    document.addEventListener("click", function (event) {
      const button = event.target.closest("[data-cancel]");
      if (button) cancel(button.dataset.cancel);
    });
    document.addEventListener("visibilitychange", refresh);
    showWho();
    refresh();
    setInterval(refresh, pollMs);
  });
})();
