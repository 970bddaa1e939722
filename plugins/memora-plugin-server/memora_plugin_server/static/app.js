// memora's web page: plain JavaScript modules, no build step, nothing from a CDN.  Everything
// from the server (model text, tool output, names) goes into the page as text or through the
// escaping Markdown renderer, never as raw HTML.
import { renderMarkdown } from "./markdown.js";

const $ = (id) => document.getElementById(id);
const state = { project: null, session: null, token: sessionStorage.getItem("memora-token") || "", busy: false };

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

function notice(text) {
  const box = $("notice");
  box.textContent = text || "";
  box.hidden = !text;
  if (text && /^UNAUTHORIZED/.test(text)) box.dataset.auth = "1";
  else delete box.dataset.auth;
}

function headers(json) {
  const h = {};
  if (json) h["Content-Type"] = "application/json";
  if (state.token) h["Authorization"] = "Bearer " + state.token;
  return h;
}

async function api(path, options = {}) {
  const response = await fetch(path, { ...options, headers: { ...headers(options.body !== undefined), ...(options.headers || {}) } });
  if (response.status === 401) $("token-form").hidden = false;
  else if (response.ok && $("notice").dataset.auth) notice(""); // the token works now: no stale banner
  if (!response.ok) {
    let message = response.status + " " + response.statusText;
    try {
      const body = await response.json();
      message = body.error.code + ": " + body.error.message;
    } catch (_) { /* not JSON */ }
    throw new Error(message);
  }
  return response;
}

const getJSON = async (path) => (await api(path)).json();
const postJSON = (path, body) => api(path, { method: "POST", body: JSON.stringify(body || {}) });
const base = () => "/v1/projects/" + encodeURIComponent(state.project);
const sessionBase = () => base() + "/sessions/" + encodeURIComponent(state.session);

// -- server-sent events over fetch (a turn starts with a POST, which EventSource cannot send) --

async function* sseEvents(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let id = null;
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("id: ")) id = line.slice(4);
        else if (line.startsWith("data: ")) data.push(line.slice(6));
      }
      if (data.length) yield { id, chunk: JSON.parse(data.join("\n")) };
    }
  }
}

const END = new Set(["done", "aborted", "paused", "error"]);

// Reads a turn's stream into `view`; when the connection drops before the turn ended, follows
// it again from the last event seen (Last-Event-ID), so nothing is missed.
async function follow(response, view) {
  const turn = response.headers.get("X-Memora-Turn");
  let last = null;
  let ended = false;
  setBusy(true);
  try {
    for (let attempt = 0; attempt < 5 && !ended; attempt += 1) {
      try {
        for await (const { id, chunk } of sseEvents(response)) {
          last = id || last;
          view.handle(chunk);
          if (END.has(chunk.type)) ended = true;
        }
      } catch (err) {
        view.status("connection lost; reconnecting…");
      }
      if (!ended && turn) {
        response = await api(sessionBase() + "/turns/" + turn + "/events", { headers: last ? { "Last-Event-ID": last } : {} });
      }
    }
  } finally {
    setBusy(false);
    refreshSide();
  }
  if (ended && state.session) {
    // the round as stored: its trace and "branch from here" (a paused turn is not one yet)
    try {
      const { rounds } = await getJSON(sessionBase());
      const round = rounds[rounds.length - 1];
      if (round && !view.root.querySelector(".trace")) view.decorate(round);
    } catch (_) { /* the answer is shown; its trace is on the next reload */ }
  }
}

function setBusy(busy) {
  state.busy = busy;
  $("abort").disabled = !busy;
  $("send").disabled = busy;
}

// -- one assistant answer being streamed ------------------------------------------------------

class TurnView {
  constructor(container) {
    this.root = el("div", { class: "msg assistant" });
    this.md = el("div", { class: "md" });
    this.root.append(this.md);
    container.append(this.root);
    this.answer = "";
    this.tools = new Map();
    this.thought = null;
    this.pending = false;
  }

  scroll() { $("log").scrollTop = $("log").scrollHeight; }

  renderAnswer() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.md.innerHTML = renderMarkdown(this.answer); // escaped by the renderer
      this.scroll();
    });
  }

  result(output) {
    // a typed turn's validated result: JSON as text (textContent: nothing in it is markup)
    const pre = el("pre", {});
    pre.textContent = JSON.stringify(output, null, 2);
    this.root.append(el("details", { class: "result", open: "" }, el("summary", {}, "Result"), pre));
    this.scroll();
  }

  status(text, cls = "status-line") {
    this.root.append(el("div", { class: cls }, text));
    this.scroll();
  }

  tool(id, name) {
    let box = this.tools.get(id);
    if (!box) {
      box = el("div", { class: "tool running", "data-tool-call": id || "" });
      box.append(el("span", { class: "name" }, name), " ", el("span", { class: "status" }, "preparing"), el("div", { class: "detail" }));
      this.root.insertBefore(box, this.md);
      this.tools.set(id, box);
    }
    return box;
  }

  handle(c) {
    switch (c.type) {
      case "text":
        if (c.stage === "meeting" && c.speaker && !this.answer.endsWith(c.speaker + ": ")) this.answer += "\n\n**" + c.speaker + "**: ";
        this.answer += c.content;
        this.renderAnswer();
        break;
      case "narrate":
        if (c.withdrawn && this.answer.endsWith(c.withdrawn)) this.answer = this.answer.slice(0, -c.withdrawn.length);
        this.renderAnswer();
        this.root.insertBefore(el("div", { class: "narrate" }, c.content), this.md);
        break;
      case "thought":
        if (!this.thought) {
          this.thought = el("details", { class: "thought" }, el("summary", {}, "Thoughts"));
          this.root.insertBefore(this.thought, this.md);
        }
        this.thought.append(c.content);
        break;
      case "tool_pending":
        this.tool(c.tool_call_id, c.name);
        break;
      case "tool_start": {
        const box = this.tool(c.tool_call_id, c.name);
        box.querySelector(".status").textContent = "running";
        box.querySelector(".detail").textContent = JSON.stringify(c.args);
        break;
      }
      case "tool_progress":
        this.tool(c.tool_call_id, c.name).querySelector(".detail").textContent = c.content;
        break;
      case "tool_result": {
        const box = this.tool(c.tool_call_id, c.name);
        box.className = "tool " + (c.blocked ? "blocked" : c.ok ? "ok" : "failed");
        box.querySelector(".status").textContent = c.blocked ? "refused" : c.ok ? "done" : "failed";
        box.querySelector(".detail").textContent = c.summary || "";
        break;
      }
      case "approval_pending":
        this.tool(c.tool_call_id, c.name).querySelector(".status").textContent = "waiting for approval";
        this.approval(c);
        break;
      case "question_pending":
        this.questions(c);
        break;
      case "retry":
        this.status("retrying (" + c.attempt + "/" + c.max_attempts + "): " + c.error);
        break;
      case "done":
        if (c.output !== null && c.output !== undefined) {
          // a typed turn: its answer is the result's JSON, shown once, as the result block
          this.answer = ""; this.md.replaceChildren(); this.result(c.output);
        } else if (c.answer && c.answer !== this.answer) { this.answer = c.answer; this.renderAnswer(); }
        if (c.usage) this.status(c.usage.input_tokens + " in · " + c.usage.output_tokens + " out");
        if (c.saved === false) this.status("not saved: this round could not be written to the session's log (the server's log says why); a reload will not show it", "status-line error");
        break;
      case "aborted":
        this.status("stopped: " + c.reason, "status-line error");
        break;
      case "error":
        this.status(c.message, "status-line error");
        break;
      default:
        break;
    }
  }

  // a stored round again: its tool cards, approvals and thoughts from the round's events
  replay(round) {
    for (const e of round.events || []) {
      switch (e.type) {
        case "tool_start": case "tool_result": case "thought":
          this.handle(e.type === "thought" ? { type: "thought", content: e.content } : e);
          break;
        case "approval":
          this.root.insertBefore(el("div", { class: "status-line" }, (e.approved ? "approved" : "denied") + (e.edited ? " (edited)" : "") + ": " + e.name), this.md);
          break;
        default:
          break;
      }
    }
    if (round.output !== null && round.output !== undefined) this.result(round.output);
    else { this.answer = round.assistant; this.md.innerHTML = renderMarkdown(round.assistant); }
    if (round.status !== "done") this.status(round.status);
    const u = round.usage || {};
    if (u.input_tokens || u.output_tokens) this.status((u.input_tokens || 0) + " in · " + (u.output_tokens || 0) + " out");
    this.decorate(round);
  }

  // what the round did, step by step, and a way to go on from it in a new session
  decorate(round) {
    const steps = el("ol", {});
    const started = {};
    const add = (text, cls = "") => steps.append(el("li", cls ? { class: cls } : {}, text));
    for (const e of round.events || []) {
      switch (e.type) {
        case "llm_call":
          add("LLM call " + (e.step + 1) + (e.stage && e.stage !== "answer" ? " (" + e.stage + ")" : "") + ": " + e.input_tokens + " in · " + e.output_tokens + " out · " + e.ms + " ms" + (e.finish ? " · " + e.finish : ""), "llm");
          break;
        case "tool_start":
          started[e.tool_call_id] = e.at;
          add("tool " + e.name + " " + JSON.stringify(e.args), "tool-call");
          break;
        case "tool_result": {
          const ms = started[e.tool_call_id] && e.at ? " · " + Math.round((e.at - started[e.tool_call_id]) * 1000) + " ms" : "";
          add("→ " + e.name + " " + (e.blocked ? "refused" : e.ok ? "ok" : "failed") + (e.summary ? ": " + e.summary : "") + ms, "tool-result");
          break;
        }
        case "approval_pending": add("asked for approval: " + e.name, "approval"); break;
        case "approval": add((e.approved ? "approved" : "denied") + (e.edited ? " with edited arguments" : "") + ": " + e.name + (e.reason ? " — " + e.reason : ""), "approval"); break;
        case "question_pending": add("asked " + (e.questions || []).length + " question(s)"); break;
        case "retry": add("retry " + e.attempt + ": " + e.error, "error"); break;
        case "error": add("error (" + e.category + "): " + e.message, "error"); break;
        case "thought": add("thought (" + String(e.content || "").length + " characters)"); break;
        default: break;
      }
    }
    const u = round.usage || {};
    const secs = round.ended_at && round.started_at ? " · " + (round.ended_at - round.started_at).toFixed(2) + " s" : "";
    add("stop: " + round.status + " · " + (u.input_tokens || 0) + " in · " + (u.output_tokens || 0) + " out" + secs + (round.model ? " · " + round.model : ""), "stop");
    const trace = el("details", { class: "trace", "data-round": round.round_id }, el("summary", {}, "Trace"), steps);
    const branch = el("button", { type: "button", class: "branch", title: "A new session with the rounds up to this one" }, "Branch from here");
    branch.addEventListener("click", async () => {
      try {
        const info = await (await postJSON(sessionBase() + "/fork", { at_round_id: round.round_id })).json();
        await openSession(info.id);
      } catch (err) { notice(err.message); }
    });
    this.root.append(el("div", { class: "round-tools" }, trace, branch));
  }

  approval(c) {
    const args = el("textarea", { rows: "4", "aria-label": "Arguments" });
    args.value = JSON.stringify(c.args, null, 2);
    const box = el("div", { class: "pause approval", "data-tool-call": c.tool_call_id });
    const decide = async (decision) => {
      box.querySelectorAll("button").forEach((b) => { b.disabled = true; });
      const body = { decision };
      if (decision === "approve" && args.value !== JSON.stringify(c.args, null, 2)) {
        try { body.args = JSON.parse(args.value); } catch (err) { notice("the arguments are not JSON: " + err.message); box.querySelectorAll("button").forEach((b) => { b.disabled = false; }); return; }
      }
      try {
        const response = await postJSON(sessionBase() + "/approvals/" + encodeURIComponent(c.tool_call_id), body);
        box.replaceWith(el("div", { class: "status-line" }, decision === "approve" ? "approved" : "denied"));
        await follow(response, this);
      } catch (err) { notice(err.message); }
    };
    box.append(
      el("div", {}, "Run ", el("strong", {}, c.name), "?", c.reason ? " — " + c.reason : ""),
      args,
      el("div", { class: "buttons" },
        el("button", { type: "button", class: "approve", onclick: () => decide("approve") }, "Approve"),
        el("button", { type: "button", class: "deny", onclick: () => decide("deny") }, "Deny")),
    );
    this.root.insertBefore(box, this.md);
    this.scroll();
  }

  questions(c) {
    const form = el("form", { class: "pause questions" });
    for (const q of c.questions) {
      const field = el("fieldset", {}, el("legend", {}, q.question));
      if (q.options && q.options.length) {
        for (const option of q.options) {
          field.append(el("label", {}, el("input", { type: "radio", name: q.slot, value: option }), " " + option), el("br"));
        }
      }
      if (!q.options || !q.options.length || q.allow_custom) field.append(el("input", { type: "text", name: q.slot + "__text", "aria-label": q.question }));
      form.append(field);
    }
    form.append(el("div", { class: "buttons" }, el("button", { type: "submit" }, "Answer")));
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const answers = {};
      for (const q of c.questions) {
        const typed = form.querySelector('input[name="' + CSS.escape(q.slot + "__text") + '"]');
        const picked = form.querySelector('input[name="' + CSS.escape(q.slot) + '"]:checked');
        answers[q.slot] = (typed && typed.value) || (picked && picked.value) || "";
      }
      try {
        const response = await postJSON(sessionBase() + "/answers", { answers });
        form.replaceWith(el("div", { class: "status-line" }, "answered"));
        await follow(response, this);
      } catch (err) { notice(err.message); }
    });
    this.root.insertBefore(form, this.md);
    this.scroll();
  }
}

// -- the side panel -----------------------------------------------------------------------------

// the page's place (#project/session): a reload or a shared link opens the same session
function place() {
  const [project, session] = location.hash.slice(1).split("/").map((part) => decodeURIComponent(part || ""));
  return { project, session };
}

async function loadProjects() {
  const { projects } = await getJSON("/v1/projects");
  const select = $("project");
  select.replaceChildren(...projects.map((p) => el("option", { value: p.name }, p.name)));
  const wanted = place();
  const known = projects.some((p) => p.name === wanted.project);
  state.project = known ? wanted.project : projects.length ? projects[0].name : null;
  select.value = state.project || "";
  if (!state.project) return;
  if (known && wanted.session) {
    try {
      await loadSessions();
      await openSession(wanted.session);
      return;
    } catch (err) { notice(err.message); } // gone, or not this token's: the most recent instead
  }
  await loadSessions(true);
}

async function loadSessions(pickFirst = false) {
  const { sessions } = await getJSON(base() + "/sessions");
  const list = $("sessions");
  list.replaceChildren(...sessions.map((s) => {
    const item = el("li", { "data-session": s.id, title: s.id }, s.title || s.id);
    if (s.id === state.session) item.classList.add("active");
    item.addEventListener("click", () => openSession(s.id));
    return item;
  }));
  if (pickFirst) {
    if (sessions.length) await openSession(sessions[0].id);
    else await newSession();
  }
}

async function newSession() {
  const info = await (await postJSON(base() + "/sessions", {})).json();
  await openSession(info.id);
}

async function openSession(id) {
  state.session = id;
  const session = await getJSON(sessionBase());
  history.replaceState(null, "", "#" + encodeURIComponent(state.project) + "/" + encodeURIComponent(id));
  const log = $("log");
  log.replaceChildren();
  for (const round of session.rounds) {
    log.append(el("div", { class: "msg user" }, round.user));
    new TurnView(log).replay(round);
  }
  if (session.pause) {
    const view = new TurnView(log);
    if (session.pause.kind === "approval") view.approval(session.pause);
    else if (session.pause.kind === "question") view.questions(session.pause);
  } else if (session.running_turn) {
    if (session.running_text) log.append(el("div", { class: "msg user" }, session.running_text));
    const view = new TurnView(log);
    follow(await api(sessionBase() + "/turns/" + session.running_turn + "/events"), view);
  }
  log.scrollTop = log.scrollHeight;
  refreshSide();
}

// "summaryFocus" -> "summary focus"
const chipLabel = (key) => key.replace(/([a-z])([A-Z])/g, "$1 $2").replace(/_/g, " ").toLowerCase();

async function refreshSide() {
  if (!state.project || !state.session) return;
  try {
    await loadSessions();
    const { role_packs: packs } = await getJSON(base() + "/role-packs?session=" + encodeURIComponent(state.session));
    const select = $("role-pack");
    select.replaceChildren(...packs.map((p) => {
      const option = el("option", { value: p.name }, p.display_name || p.name);
      if (p.active) option.selected = true;
      return option;
    }));
    const active = packs.find((p) => p.active);
    $("chips").replaceChildren(...Object.entries((active && active.strategy) || {})
      .filter(([, v]) => v !== null && v !== undefined && v !== "")
      .map(([k, v]) => el("span", { title: k }, chipLabel(k) + ": " + (typeof v === "object" ? JSON.stringify(v) : v))));
    const { tasks } = await getJSON(sessionBase() + "/tasks");
    $("tasks").replaceChildren(...tasks.map((t) => el("li", { "data-status": t.status }, "[" + t.status + "] " + t.description)));
  } catch (err) { notice(err.message); }
}

// -- wiring -------------------------------------------------------------------------------------

async function send(event) {
  event.preventDefault();
  const box = $("message");
  const text = box.value.trim();
  if (!text || state.busy) return;
  box.value = "";
  notice("");
  const log = $("log");
  log.append(el("div", { class: "msg user" }, text));
  const view = new TurnView(log);
  try {
    await follow(await postJSON(sessionBase() + "/turns", { text }), view);
  } catch (err) { view.status(err.message, "status-line error"); }
}

// -- memory: what memora remembers, seen, corrected and forgotten in place ----------------------

async function searchMemory(q) {
  const { hits } = await getJSON(base() + "/memory/search?q=" + encodeURIComponent(q));
  $("memory-hits").replaceChildren(...(hits.length ? hits.map((h) => memoryItem(h, q)) : [el("li", {}, "nothing found")]));
}

function memoryItem(h, q) {
  const item = el("li", { class: "memory", "data-memory": h.id });
  const body = el("div", { class: "md" });
  body.innerHTML = renderMarkdown(h.content); // escaped by the renderer
  const when = h.created_at ? new Date(h.created_at * 1000).toLocaleString() : "";
  const how = (h.meta && h.meta.written ? " · " + h.meta.written : "") +
    (h.meta && h.meta.edited && h.meta.edited.by ? " · edited by " + h.meta.edited.by : "");
  const where = [h.name, h.scope ? "user " + h.scope : "", h.session_id ? "session " + h.session_id : "", h.round_id ? "round " + h.round_id : "", when].filter(Boolean).join(" · ");
  const edit = el("button", { type: "button", class: "edit" }, "Edit");
  const forget = el("button", { type: "button", class: "forget" }, "Forget");
  edit.addEventListener("click", () => {
    const text = el("textarea", { rows: "5", "aria-label": "Memory text" });
    text.value = h.content;
    const save = el("button", { type: "button", class: "save" }, "Save");
    const cancel = el("button", { type: "button" }, "Cancel");
    const editor = el("div", { class: "memory-editor" }, text, el("div", { class: "buttons" }, save, cancel));
    cancel.addEventListener("click", () => editor.remove());
    save.addEventListener("click", async () => {
      try {
        await postJSON(base() + "/memory/" + encodeURIComponent(h.id) + "/edit", { content: text.value });
        await searchMemory(q);
      } catch (err) { notice(err.message); }
    });
    item.append(editor);
  });
  forget.addEventListener("click", () => {
    // out of recall only, or everywhere: its text out of its history and the conversation too
    if (item.querySelector(".forget-choice")) return;
    const recall = el("button", { type: "button", class: "forget-recall" }, "Out of recall");
    const everywhere = el("button", { type: "button", class: "forget-everywhere" }, "Everywhere");
    const cancel = el("button", { type: "button" }, "Cancel");
    const choice = el("div", { class: "forget-choice" },
      el("p", {}, "Forget from recall only, or everywhere — also its history's text and the conversation it came from (who asked and when is kept)?"),
      el("div", { class: "buttons" }, recall, everywhere, cancel));
    const go = async (all) => {
      try {
        await postJSON(base() + "/memory/" + encodeURIComponent(h.id) + "/forget" + (all ? "?everywhere=1" : ""));
        item.replaceWith(el("li", { class: "status-line" }, all ? "forgotten everywhere" : "forgotten"));
      } catch (err) { notice(err.message); }
    };
    recall.addEventListener("click", () => go(false));
    everywhere.addEventListener("click", () => go(true));
    cancel.addEventListener("click", () => choice.remove());
    item.append(choice);
  });
  const pinned = Boolean(h.meta && h.meta.pinned);
  const pin = el("button", { type: "button", class: "pin", "aria-pressed": String(pinned) }, pinned ? "Unpin" : "Pin");
  pin.addEventListener("click", async () => {
    try {
      await postJSON(base() + "/memory/" + encodeURIComponent(h.id) + (pinned ? "/unpin" : "/pin"));
      await searchMemory(q);
    } catch (err) { notice(err.message); }
  });
  const mark = pinned ? " · pinned" : "";
  item.append(body, el("div", { class: "provenance" }, where + how + mark), el("div", { class: "buttons" }, edit, forget, pin));
  return item;
}

function wire() {
  $("menu").addEventListener("click", () => document.body.classList.toggle("side-open"));
  $("close-side").addEventListener("click", () => document.body.classList.remove("side-open"));
  document.querySelector("main").addEventListener("click", (event) => {
    if (event.target !== $("menu")) document.body.classList.remove("side-open"); // a tap beside the panel
  });
  $("sessions").addEventListener("click", () => document.body.classList.remove("side-open"));
  $("composer").addEventListener("submit", send);
  $("message").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) send(event);
  });
  $("abort").addEventListener("click", () => postJSON(sessionBase() + "/abort").catch((err) => notice(err.message)));
  $("new-session").addEventListener("click", () => newSession().catch((err) => notice(err.message)));
  $("project").addEventListener("change", (event) => { state.project = event.target.value; state.session = null; loadSessions(true).catch((err) => notice(err.message)); });
  $("role-pack").addEventListener("change", (event) => postJSON(sessionBase() + "/role-pack", { name: event.target.value }).then(refreshSide).catch((err) => notice(err.message)));
  $("memory-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const q = $("memory-q").value.trim();
    if (!q) return;
    try {
      await searchMemory(q);
    } catch (err) { notice(err.message); }
  });
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    state.token = $("token").value.trim();
    sessionStorage.setItem("memora-token", state.token);
    $("token-form").hidden = true;
    loadProjects().catch((err) => notice(err.message));
  });
}

wire();
loadProjects().catch((err) => notice(err.message));
