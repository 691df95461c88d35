// The login page: posts the user name and password as JSON; the broker answers with a
// session cookie (HttpOnly), and the dashboard loads in its place.
"use strict";

document.getElementById("login").addEventListener("submit", async (event) => {
  event.preventDefault();
  const error = document.getElementById("login-error");
  error.textContent = "";
  const body = JSON.stringify({
    username: document.getElementById("username").value,
    password: document.getElementById("password").value,
  });
  try {
    const response = await fetch("/api/v1/login", {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json" }, body,
    });
    if (response.ok) {
      window.location.replace("/");
      return;
    }
    const answer = await response.json().catch(() => ({}));
    error.textContent = answer.error || `the broker answered ${response.status}`;
  } catch (failure) {
    error.textContent = `the broker cannot be reached: ${failure.message}`;
  }
});
