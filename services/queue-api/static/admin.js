"use strict";
// The back office. The admin token is kept in this tab's sessionStorage and sent as
// an Authorization header (never a cookie, so no other site's page can make the
// browser use it). Every 2 s it reads the live counts of the queues on the page shown
// (searched by name, PAGE at a time, with the count of all and a notice when the list
// is cut) and keeps the last minutes of them for the chart (inline SVG). Changes go
// through the admin API; an error the API gives about one field is shown at that
// field. Queues are created (or opened) by name and deleted once empty. Durations are
// shown and typed as durations ("2 min 30 s", "90s", "5m") and times as local
// date-times; the API speaks milliseconds. The gates running now (as each describes
// itself) are listed with their settings, and each queue shows the gate routes that
// lead to it; its waiting room opens as a visitor of the gated app meets it.
(() => {
  const $ = (id) => document.getElementById(id);
  const TOKEN = "queue-admin-token";
  const POLL_MS = 2000;
  const PAGE = 50;
  const HISTORY_MS = 10 * 60 * 1000;
  const GATES_EVERY = 5; // the gates are read every fifth refresh (10 s)
  // The settings shown in the form (opens_at has its own form), in this order: what
  // each is called here and what it does, in the operator's words. `ms`: a duration.
  const SETTINGS = [
    ["soft_cap", "Admitted at a time", "How many people may be inside, or on their way in with their turn come, at the same time. 0 pauses admission."],
    ["hard_cap", "Most inside", "People inside never exceed this, even while the number above is raised (0: no limit)."],
    ["rate", "Let in per second", "How many people are let in per second at most (0: no limit)."],
    ["burst", "Let in at once after a lull", "How many may be let in at once after a quiet spell (0: as many as per second)."],
    ["batch_max", "Let in per round", "The most people one admission round lets in."],
    ["ticket_ttl", "Time to come in", "How long someone whose turn came has to come in before the place goes to the next person.", "ms"],
    ["session_lease", "Kept inside without a sign of life", "How long someone inside keeps their place when neither their app nor the gate says they are still there.", "ms"],
    ["abandon_after", "Drop silent waiters after", "Someone waiting whose page has not been heard from for this long loses their place (0: never).", "ms"],
    ["max_waiting", "Most waiting", "Newcomers are turned away once this many wait, in line and before the opening (0: no limit)."],
    ["pow_difficulty", "Puzzle before entering", "How hard a puzzle each browser solves before it may enter, in bits: it slows scripted entries down (0: none; 16 is a good start)."],
  ];
  const DURATION_HELP = "Type a duration such as 90s, 5m, 1h 30m or 2 min 30 s (a number alone is seconds).";
  const BRAND = [
    ["title", "Title", "text"], ["message", "Message", "textarea"], ["logo_url", "Logo URL (a path on this site)", "text"],
    ["accent", "Accent colour (#rrggbb)", "text"], ["background", "Background colour (#rrggbb)", "text"],
    ["nickname", "Ask a nickname", "select"],
  ];
  // The page's `nickname` setting: whether it asks one before entering.
  const NICKNAME = [["", "As the queue's default (none with an admit URL, else ask)"], ["ask", "Ask a nickname"],
    ["none", "Ask nothing: the page enters as it loads"]];
  const number = (n) => (n == null ? "—" : new Intl.NumberFormat().format(n));
  // A duration in ms as "1 h 2 min 3 s" (exact: every unit that is not zero).
  const UNITS = [["d", 86_400_000], ["h", 3_600_000], ["min", 60_000], ["s", 1000], ["ms", 1]];
  const formatMs = (ms) => {
    if (ms == null) return "—";
    if (ms === 0) return "0 s";
    const parts = [];
    let left = Math.round(ms);
    for (const [unit, size] of UNITS) {
      if (left >= size) { parts.push(Math.floor(left / size) + " " + unit); left %= size; }
    }
    return parts.join(" ");
  };
  // An estimate in seconds, roughly: its two largest units.
  const duration = (s) => (s == null ? "—" : formatMs(s * 1000).split(" ").slice(0, 4).join(" "));
  // "90s", "5m", "1h 30m", "2 min 30 s", "1500 ms", "1.5h"; a number alone is seconds.
  // The milliseconds, or null when it is not a duration.
  const SIZES = { ms: 1, millisecond: 1, milliseconds: 1, s: 1000, sec: 1000, secs: 1000, second: 1000, seconds: 1000,
    m: 60_000, min: 60_000, mins: 60_000, minute: 60_000, minutes: 60_000, h: 3_600_000, hr: 3_600_000, hrs: 3_600_000,
    hour: 3_600_000, hours: 3_600_000, d: 86_400_000, day: 86_400_000, days: 86_400_000 };
  function parseDuration(text) {
    const t = text.trim().toLowerCase().replace(/,/g, " ");
    if (/^\d+(\.\d+)?$/.test(t)) return Math.round(Number(t) * 1000);
    const re = /(\d+(?:\.\d+)?)\s*([a-z]+)\s*/y;
    let total = 0, m, matched = 0;
    while ((m = re.exec(t)) !== null) {
      const size = SIZES[m[2]];
      if (!size) return null;
      total += Number(m[1]) * size;
      matched = re.lastIndex;
    }
    return matched && matched === t.length ? Math.round(total) : null;
  }
  const when = (ms) => new Date(ms).toLocaleString();

  let selected = null; // the queue shown in detail
  let shown = null; // its last detail (info, brand, counts)
  const history = new Map(); // queue -> [{at, waiting, inside, ticketsOut}]
  let timer = null;
  let help = {}; // setting -> {minimum, maximum, description}
  let search = ""; // the listing's search
  let offset = 0; // the first queue of the page shown
  let total = 0; // how many queues match the search
  let gates = null; // the gates' descriptions and routes (GET api/admin/gates), null until read
  let refreshes = 0;

  const token = () => sessionStorage.getItem(TOKEN);

  async function api(method, path, body) {
    const r = await fetch(path, {
      method,
      headers: { Authorization: "Bearer " + token(), ...(body ? { "Content-Type": "application/json" } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    const data = await r.json().catch(() => ({}));
    if (r.status === 401 || r.status === 403) {
      signOut(r.status === 401 ? "The token was refused: sign in again." : (data.message || "The back office is disabled."));
      throw new Error("signed out");
    }
    return { ok: r.ok, status: r.status, data };
  }

  const say = (text) => { $("status").textContent = text; };

  function signOut(message) {
    sessionStorage.removeItem(TOKEN);
    if (timer) { clearInterval(timer); timer = null; }
    $("console").hidden = true;
    $("signout").hidden = true;
    $("signin").hidden = false;
    $("token-error").textContent = message || "";
    $("token").value = "";
    $("token").focus();
  }

  async function signIn(candidate) {
    sessionStorage.setItem(TOKEN, candidate);
    try {
      const r = await api("GET", "api/admin/queues");
      if (!r.ok) { signOut(r.data.message || "The back office answered " + r.status); return; }
    } catch (e) {
      if (e.message !== "signed out") signOut("Could not reach queue-api.");
      return;
    }
    $("token-error").textContent = "";
    $("signin").hidden = true;
    $("console").hidden = false;
    $("signout").hidden = false;
    await loadHelp();
    await refresh();
    timer = setInterval(refresh, POLL_MS);
  }

  // Each setting's range and meaning, from the API's own description.
  async function loadHelp() {
    try {
      const doc = await (await fetch("api/openapi.json")).json();
      const put = doc.paths["/api/admin/queues/{queue}"].put;
      help = put.requestBody.content["application/json"].schema.properties;
    } catch (_) { help = {}; }
  }

  function remember(q, c, at) {
    const h = history.get(q) || [];
    if (!h.length || h[h.length - 1].at !== at) h.push({ at, waiting: c.waiting, inside: c.inside, ticketsOut: c.ticketsOut });
    while (h.length && h[0].at < at - HISTORY_MS) h.shift();
    history.set(q, h);
  }

  function admission(c) {
    if (c.pausedSoftCap != null && c.paused) return "Paused";
    if (c.paused) return "Soft cap 0";
    if (c.opensAt && c.opensAt > Date.now()) return "Opens " + when(c.opensAt);
    return "Open (soft cap " + number(c.softCap) + ")";
  }

  function listing() {
    return "api/admin/queues?" + new URLSearchParams({ search, offset: String(offset), limit: String(PAGE) });
  }

  // "Showing 1–50 of 1,234 queues", the notice when the list is cut, the pager.
  function showCount(d) {
    total = d.total;
    const n = d.queues.length;
    const matching = search ? " matching “" + search + "” (" + number(d.known) + " in all)" : "";
    $("count").textContent = n
      ? "Showing " + number(d.offset + 1) + "–" + number(d.offset + n) + " of " + number(d.total) + " queues" + matching + "."
      : (search ? "No queue matches “" + search + "” (" + number(d.known) + " in all)." : "No queue on this page.");
    $("cut").hidden = !d.truncated;
    $("cut").textContent = d.truncated
      ? "The list is cut: " + number(d.total - n) + " more " + (d.total - n === 1 ? "queue is" : "queues are") +
        " not shown. Search by name or turn the page."
      : "";
    $("prev").disabled = d.offset === 0;
    $("next").disabled = d.offset + n >= d.total;
  }

  async function refresh() {
    if (refreshes++ % GATES_EVERY === 0) loadGates();
    let r;
    try { r = await api("GET", listing()); } catch (_) { return; }
    if (!r.ok) { say("Could not read the queues: " + (r.data.message || r.status)); return; }
    if (!r.data.queues.length && offset > 0 && r.data.total > 0) {
      // The page emptied (queues deleted): back to the last page there is.
      offset = Math.max(0, Math.floor((r.data.total - 1) / PAGE) * PAGE);
      return refresh();
    }
    showCount(r.data);
    const body = $("queues").tBodies[0];
    body.textContent = "";
    for (const c of r.data.queues) {
      remember(c.queue, c, r.data.at);
      const tr = document.createElement("tr");
      tr.dataset.queue = c.queue;
      const th = document.createElement("th");
      th.scope = "row";
      const b = document.createElement("button");
      b.type = "button";
      b.className = "link";
      b.textContent = c.queue;
      b.setAttribute("aria-pressed", String(c.queue === selected));
      b.addEventListener("click", () => select(c.queue));
      th.append(b);
      tr.append(th);
      for (const [key, v] of [["waiting", number(c.waiting)], ["ticketsOut", number(c.ticketsOut)], ["inside", number(c.inside)],
        ["admittedPerMinute", number(c.admittedPerMinute)], ["lastInLine", duration(c.lastInLineWaitSeconds)],
        ["admission", admission(c)]]) {
        const td = document.createElement("td");
        td.dataset.field = key;
        td.textContent = v;
        tr.append(td);
      }
      body.append(tr);
    }
    $("no-queues").hidden = r.data.queues.length > 0 || !search;
    if (!selected && r.data.queues.length) select(r.data.queues[0].queue);
    else if (selected) loadDetail(false);
  }

  async function select(q) {
    selected = q;
    shown = null;
    $("detail").hidden = false;
    $("detail-title").textContent = "Queue " + q;
    for (const b of document.querySelectorAll("#queues button.link")) {
      b.setAttribute("aria-pressed", String(b.textContent === q));
    }
    await loadDetail(true);
  }

  // The selected queue's counts, settings and branding; the forms are filled when
  // `fill` (a new selection or after a save), not while someone types.
  async function loadDetail(fill) {
    const q = selected;
    let r;
    try { r = await api("GET", "api/admin/queues/" + encodeURIComponent(q)); } catch (_) { return; }
    if (q !== selected) return;
    if (!r.ok) { say(r.data.message || "Could not read " + q); return; }
    shown = r.data;
    remember(q, shown.counts, Date.now());
    drawChart(history.get(q) || []);
    const c = shown.counts;
    $("pause").disabled = c.paused;
    $("resume").disabled = c.pausedSoftCap == null;
    const busy = c.waiting + c.ticketsOut + c.inside;
    $("delete").disabled = q === "default" || busy > 0;
    $("delete-state").textContent = q === "default"
      ? "The default queue always exists."
      : busy > 0 ? "Only an empty queue can be deleted: " + number(busy) + " people wait, hold a ticket or are inside." : "";
    $("pause-state").textContent = c.pausedSoftCap != null
      ? "Paused: resuming restores a soft cap of " + number(c.pausedSoftCap) + "."
      : c.paused ? "The soft cap is 0: nobody is admitted." : "Admitting up to a soft cap of " + number(c.softCap) + ".";
    if (fill) { fillSettings(); fillBrand(); fillOpening(); fillSale(); }
    showSale();
    showRoutes();
    showOpening();
    showCodes();
  }

  function field(container, name, label, kind, value, helpText) {
    const div = document.createElement("div");
    div.className = "field";
    const l = document.createElement("label");
    l.htmlFor = "f-" + name;
    l.textContent = label;
    const input = document.createElement(kind === "textarea" ? "textarea" : "input");
    input.id = "f-" + name;
    input.name = name;
    if (kind !== "textarea") input.type = "text";
    if (kind === "number") input.inputMode = "numeric";
    input.value = value ?? "";
    const err = document.createElement("p");
    err.id = "error-" + name;
    err.className = "error";
    const described = [err.id];
    div.append(l, input);
    if (helpText) {
      const h = document.createElement("small");
      h.id = "help-" + name;
      h.className = "muted";
      h.textContent = helpText;
      div.append(h);
      described.push(h.id);
    }
    input.setAttribute("aria-describedby", described.join(" "));
    div.append(err);
    container.append(div);
  }

  // The range the API gives for a setting, in the setting's own unit.
  function range(name, kind) {
    const h = help[name];
    if (!h || h.minimum == null) return null;
    return kind === "ms" ? [h.minimum, h.maximum, formatMs(h.minimum) + " to " + formatMs(h.maximum)]
      : [h.minimum, h.maximum, number(h.minimum) + " to " + number(h.maximum)];
  }

  function fillSettings() {
    const box = $("settings-fields");
    box.textContent = "";
    for (const [name, label, text, kind] of SETTINGS) {
      const r = range(name, kind);
      const value = kind === "ms" ? formatMs(shown.info[name]) : shown.info[name];
      const more = (kind === "ms" ? " " + DURATION_HELP : "") + (r ? " From " + r[2] + "." : "");
      field(box, name, label, kind === "ms" ? "text" : "number", value, text + more);
    }
    entryField(box);
    field(box, "lanes", "Lanes", "text", (shown.lanes || []).join(","),
      "Names of the queue's lanes, separated by commas, first admitted first (2 to 8; empty: one lane). Changes only while nobody waits.");
  }

  // Who may enter: a choice of three words, not a number.
  const ENTRY = [["open", "Anyone"], ["identified", "Only people signed in to the app"],
    ["invite", "Only people invited (an access code, or a sign-in naming a lane)"]];
  function entryField(box) {
    field(box, "entry", "Who may enter", "text", "", "Anyone, only people signed in to the app, or only people invited.");
    const input = $("f-entry");
    const select = document.createElement("select");
    for (const a of ["id", "name"]) select.setAttribute(a, input.getAttribute(a));
    select.setAttribute("aria-describedby", input.getAttribute("aria-describedby"));
    for (const [value, label] of ENTRY) {
      const o = document.createElement("option");
      o.value = value;
      o.textContent = label;
      select.append(o);
    }
    select.value = shown.entry || "open";
    input.replaceWith(select);
  }

  function fillBrand() {
    const box = $("brand-fields");
    box.textContent = "";
    for (const [name, label, kind] of BRAND) {
      field(box, name, label, kind === "select" ? "text" : kind, shown.brand[name], "");
      if (kind === "select") choice(name, NICKNAME, shown.brand[name] || "");
    }
  }

  // A text field made a choice of `options` ([value, label]).
  function choice(name, options, value) {
    const input = $("f-" + name);
    const select = document.createElement("select");
    for (const a of ["id", "name", "aria-describedby"]) select.setAttribute(a, input.getAttribute(a));
    for (const [v, label] of options) {
      const o = document.createElement("option");
      o.value = v;
      o.textContent = label;
      select.append(o);
    }
    select.value = value;
    input.replaceWith(select);
  }

  // A time in ms as the value of a datetime-local input (local time), "" for none.
  const localInput = (at) => {
    if (!at) return "";
    const d = new Date(at);
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + "T" +
      pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  };

  // The sale: closing time, units left, outstanding, sold out, the message.
  function fillSale() {
    const c = shown.counts;
    $("closes-at").value = localInput(c.closesAt);
    $("f-inventory").value = c.inventory == null ? "" : String(c.inventory);
    $("f-text").value = c.message || "";
  }
  function showSale() {
    const c = shown.counts;
    const parts = [];
    parts.push(c.closed ? "Closed: the sale has ended, nobody new can join." : c.closesAt ? "Open until " + when(c.closesAt) + "." : "Open (no closing time).");
    parts.push(c.inventory == null ? "No unit limit." : c.soldOut ? "Sold out (0 units left)." : number(c.inventory) + " units left.");
    parts.push(number(c.outstanding) + " people hold a ticket or are inside and have not bought yet.");
    if (c.message) parts.push("Message shown: “" + c.message + "”.");
    $("sale-state").textContent = parts.join(" ");
  }

  async function saveSale(e) {
    e.preventDefault();
    const form = $("sale-form");
    clearErrors(form);
    const body = {};
    const v = $("closes-at").value;
    const at = v ? new Date(v).getTime() : null;
    if (v && Number.isNaN(at)) {
      $("error-closes_at").textContent = "Choose a date and time, or leave it empty.";
      $("closes-at").setAttribute("aria-invalid", "true");
      return;
    }
    if ((at || null) !== (shown.counts.closesAt || null)) body.closes_at = at;
    const raw = $("f-inventory").value.trim();
    const inv = raw === "" ? null : Number(raw);
    if (raw !== "" && !Number.isInteger(inv)) {
      $("error-inventory").textContent = "Units left: a whole number, or empty for no limit.";
      $("f-inventory").setAttribute("aria-invalid", "true");
      $("f-inventory").focus();
      return;
    }
    if (inv !== (shown.counts.inventory ?? null)) body.inventory = inv;
    if (!Object.keys(body).length) { say("Nothing changed."); return; }
    await send(form, "PUT", "", body, "The sale's settings saved.");
  }

  async function saveMessage(text) {
    const form = $("message-form");
    clearErrors(form);
    await send(form, "PUT", "/message", { text }, text.trim() ? "Message sent to everyone waiting." : "Message cleared.");
  }

  const pad = (n) => String(n).padStart(2, "0");
  function fillOpening() {
    const at = shown.info.opens_at;
    if (!at) { $("opens-at").value = ""; return; }
    const d = new Date(at);
    $("opens-at").value = d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + "T" +
      pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  }

  let commitmentFor = null;
  async function showOpening() {
    const at = shown.info.opens_at;
    const box = $("opening-state");
    if (!at) { box.textContent = "No opening scheduled: the line is open."; commitmentFor = null; return; }
    if (commitmentFor === selected + ":" + at) return;
    commitmentFor = selected + ":" + at;
    const o = await (await fetch("api/queue/opening?queue=" + encodeURIComponent(selected))).json().catch(() => ({}));
    box.textContent = "";
    const p = document.createElement("p");
    p.textContent = (o.state === "open" ? "Opened (" : "Opens ") + when(at) +
      (o.state === "open" ? ")" : "") + " — " + number(o.entrants ?? 0) + " in the pre-queue so far.";
    const c = document.createElement("p");
    c.append("Commitment to the draw: ");
    const code = document.createElement("code");
    code.id = "commitment";
    code.textContent = o.commitment || "—";
    const a = document.createElement("a");
    a.href = "api/queue/opening?queue=" + encodeURIComponent(selected);
    a.textContent = "proof";
    c.append(code, " (", a, ")");
    box.append(p, c);
  }

  // Per lane: who waits, who was admitted (the queue's lane counts) and the codes'
  // uses left (null: not known yet). Hidden for a queue without lanes.
  function showLanes(codes) {
    const lanes = (shown && shown.info && shown.info.lane_counts) || [];
    const left = new Map((codes || []).map((l) => [l.lane, l.left]));
    $("lanes-table").hidden = !lanes.length;
    $("lanes-wrap").hidden = !lanes.length;
    $("lanes-none").hidden = lanes.length > 0;
    const rows = $("lane-rows");
    rows.textContent = "";
    for (const l of lanes) {
      const tr = document.createElement("tr");
      const codesLeft = left.has(l.lane) ? number(left.get(l.lane)) : "—";
      for (const v of [l.lane, number(l.waiting), number(l.admitted), codesLeft]) {
        const td = document.createElement("td");
        td.textContent = v;
        tr.append(td);
      }
      rows.append(tr);
    }
  }

  // Access codes: each lane's counts, and the lanes to add codes to.
  async function showCodes() {
    const q = selected;
    showLanes(null);
    let r;
    try { r = await api("GET", "api/admin/queues/" + encodeURIComponent(q) + "/codes"); } catch (_) { return; }
    if (q !== selected || !r.ok) return;
    showLanes(r.data.lanes);
    const rows = $("codes-rows");
    rows.textContent = "";
    for (const l of r.data.lanes || []) {
      const tr = document.createElement("tr");
      for (const v of [l.lane, number(l.codes), number(l.used), number(l.left)]) {
        const td = document.createElement("td");
        td.textContent = v;
        tr.append(td);
      }
      rows.append(tr);
    }
    const select = $("codes-lane");
    const was = select.value;
    select.textContent = "";
    for (const name of r.data.laneNames || []) {
      const o = document.createElement("option");
      o.value = o.textContent = name;
      select.append(o);
    }
    if (was) select.value = was;
    $("codes-form").hidden = !(r.data.laneNames || []).length;
  }

  async function addCodes(e) {
    e.preventDefault();
    const form = $("codes-form");
    clearErrors(form);
    const file = $("codes-file").files[0];
    const text = file ? await file.text() : $("codes-text").value;
    if (!text.trim()) { $("error-codes").textContent = "Paste codes or choose a CSV file."; return; }
    const query = "?lane=" + encodeURIComponent($("codes-lane").value) + "&uses=" + encodeURIComponent($("codes-uses").value.trim());
    let r;
    try {
      r = await fetch("api/admin/queues/" + encodeURIComponent(selected) + "/codes" + query, {
        method: "POST",
        headers: { Authorization: "Bearer " + token(), "Content-Type": "text/csv" },
        body: text,
      });
    } catch (_) { say("The codes could not be sent."); return; }
    const data = await r.json().catch(() => ({}));
    if (!r.ok) {
      $("error-codes").textContent = data.message || "The codes were refused (" + r.status + ").";
      if (data.lines) {
        $("error-codes").textContent += " " + data.lines.map((l) => "line " + l.line + ": " + l.message).join("; ");
      }
      $("codes-text").setAttribute("aria-invalid", "true");
      return;
    }
    say(number(data.given) + " codes sent, " + number(data.added) + " new.");
    $("codes-text").value = "";
    $("codes-file").value = "";
    showCodes();
  }

  function clearErrors(form) {
    for (const e of form.querySelectorAll(".error")) e.textContent = "";
    for (const i of form.querySelectorAll("[aria-invalid]")) i.removeAttribute("aria-invalid");
  }

  // An API error about a field is shown at that field (and focuses it); any other
  // error in the status line.
  function showError(form, r) {
    const name = r.data.field;
    const err = name && form.querySelector("#error-" + CSS.escape(name));
    if (err) {
      err.textContent = r.data.message;
      const input = form.querySelector("[name='" + CSS.escape(name) + "'], #opens-at, #closes-at");
      if (input) { input.setAttribute("aria-invalid", "true"); input.focus(); }
    } else {
      say(r.data.message || "The change was refused (" + r.status + ").");
    }
  }

  async function saveSettings(e) {
    e.preventDefault();
    const form = $("settings-form");
    clearErrors(form);
    const body = {};
    let bad = null;
    for (const [name, label, , kind] of SETTINGS) {
      const input = form.elements[name];
      const raw = input.value.trim();
      if (kind === "ms") {
        // Checked here: a duration the API would refuse is said in durations, not ms.
        const ms = parseDuration(raw);
        const r = range(name, kind);
        let message = null;
        if (ms == null) message = label + ": not a duration. " + DURATION_HELP;
        else if (r && (ms < r[0] || ms > r[1])) message = label + " must be from " + r[2] + ".";
        if (message) {
          $("error-" + name).textContent = message;
          input.setAttribute("aria-invalid", "true");
          bad = bad || input;
          continue;
        }
        if (ms !== shown.info[name]) body[name] = ms;
        continue;
      }
      if (raw === String(shown.info[name])) continue;
      body[name] = raw !== "" && !Number.isNaN(Number(raw)) ? Number(raw) : raw;
    }
    if (bad) { bad.focus(); say("Nothing saved: correct the marked settings."); return; }
    if (form.elements.entry && form.elements.entry.value !== (shown.entry || "open")) body.entry = form.elements.entry.value;
    if (form.elements.lanes && form.elements.lanes.value.trim() !== (shown.lanes || []).join(",")) {
      body.lanes = form.elements.lanes.value.trim();
    }
    if (!Object.keys(body).length) { say("Nothing changed."); return; }
    await send(form, "PUT", "", body, "Settings saved: " + Object.keys(body).join(", ") + ".");
  }

  async function saveBrand(e) {
    e.preventDefault();
    const form = $("brand-form");
    clearErrors(form);
    const body = {};
    for (const [name] of BRAND) {
      const v = form.elements[name].value;
      if (v.trim() !== (shown.brand[name] ?? "")) body[name] = v;
    }
    if (!Object.keys(body).length) { say("Nothing changed."); return; }
    await send(form, "PUT", "/brand", body, "Branding saved.");
  }

  async function scheduleOpening(e) {
    e.preventDefault();
    const form = $("opening-form");
    clearErrors(form);
    const v = $("opens-at").value;
    const at = v ? new Date(v).getTime() : NaN;
    if (Number.isNaN(at)) {
      $("error-opens_at").textContent = "Choose a date and time.";
      $("opens-at").setAttribute("aria-invalid", "true");
      return;
    }
    await send(form, "PUT", "", { opens_at: at }, "Opening scheduled for " + when(at) + ".");
  }

  async function send(form, method, suffix, body, done) {
    let r;
    try { r = await api(method, "api/admin/queues/" + encodeURIComponent(selected) + suffix, body); } catch (_) { return; }
    if (!r.ok) { showError(form, r); return; }
    say(done);
    shown = r.data;
    await loadDetail(true);
  }

  async function action(what) {
    let r;
    try { r = await api("POST", "api/admin/queues/" + encodeURIComponent(selected) + "/" + what); } catch (_) { return; }
    if (!r.ok) { say(r.data.message || what + " failed"); return; }
    say(what === "pause" ? "Admission paused for " + selected + "." : "Admission resumed for " + selected + ".");
    await refresh();
    await loadDetail(true);
  }

  async function create(q) {
    let r;
    try { r = await api("POST", "api/admin/queues", { queue: q }); } catch (_) { return; }
    if (!r.ok) { $("open-error").textContent = r.data.message || "Could not create " + q + "."; return; }
    say(r.status === 201 ? "Queue " + q + " created: people can enter it now." : "Queue " + q + " opened.");
    await select(q);
    await refresh();
  }

  async function remove() {
    const q = selected;
    if (!q || !window.confirm("Delete queue " + q + "? Its settings and branding are removed, and people can no longer enter it.")) return;
    let r;
    try { r = await api("DELETE", "api/admin/queues/" + encodeURIComponent(q)); } catch (_) { return; }
    if (!r.ok) { say(r.data.message || "Could not delete " + q + "."); return; }
    say("Queue " + q + " deleted.");
    selected = null;
    shown = null;
    history.delete(q);
    $("detail").hidden = true;
    await refresh();
  }

  // The gates running now, as each describes itself (read every GATES_EVERY refreshes).
  async function loadGates() {
    let r;
    try { r = await api("GET", "api/admin/gates"); } catch (_) { return; }
    if (!r.ok) return;
    gates = r.data;
    showGates();
    if (shown) showRoutes();
  }

  // Where a gate is reached when its route names no host and it was given no public
  // URL: the address it listens on (this page's host name when it listens on every
  // interface).
  function gateBase(listen) {
    const m = /^(.*):(\d+)$/.exec(listen || "");
    if (!m) return null;
    const any = m[1] === "0.0.0.0" || m[1] === "[::]";
    const host = any ? (location.hostname.includes(":") ? "[" + location.hostname + "]" : location.hostname) : m[1];
    return "http://" + host + ":" + m[2];
  }

  // The waiting room of `q` as a visitor sent by the route `r` meets it: the gate's
  // room (served by the gate, so that the admitted person's ticket is claimed there)
  // with the route's path to return to. null when the gate serves no room.
  function roomThroughGate(r, q) {
    const room = r.waitingRoom || "/gate/room/";
    const params = "queue=" + encodeURIComponent(q) + "&return=" + encodeURIComponent(r.prefix || "/");
    if (/^https?:\/\//i.test(room)) return room + (room.includes("?") ? "&" : "?") + params;
    if (!r.servesRoom) return null;
    const base = r.host ? location.protocol + "//" + r.host : (r.publicUrl ? r.publicUrl.replace(/\/+$/, "") : gateBase(r.listen));
    return base ? base + room + "?" + params : null;
  }

  const where = (r) => (r.host ? r.host : "any host") + ", path " + r.prefix;

  // The gate routes that lead to the selected queue, and its waiting room's link.
  function showRoutes() {
    const q = selected;
    const routes = ((gates && gates.routes) || []).filter((r) => r.queue === q);
    const list = $("routes-list");
    list.textContent = "";
    for (const r of routes) {
      const li = document.createElement("li");
      li.textContent = where(r) + " — " + (r.mode === "proxy" ? "gate in front of the app" : "gate asked by your proxy") +
        " (" + r.gate + ", listening on " + r.listen + ")";
      list.append(li);
    }
    $("routes-none").hidden = routes.length > 0;
    $("routes-none").textContent = gates
      ? "No running gate sends people to this queue."
      : "Reading the gates…";
    const link = $("preview");
    const note = $("preview-note");
    // A route with a host first: that is the address visitors use.
    const through = [...routes].sort((a, b) => (b.host ? 1 : 0) - (a.host ? 1 : 0)).map((r) => [r, roomThroughGate(r, q)]).find(([, u]) => u);
    const admit = (shown && shown.admitUrl) || "";
    // An admit URL that is a path on this site other than the room's own (the gate's
    // /gate/claim) works only where that site is the gate.
    const gateOnly = admit.startsWith("/") && !admit.startsWith("//");
    if (through) {
      link.href = through[1];
      link.hidden = false;
      note.textContent = "Opens the room through the gate (" + where(through[0]) + "), as visitors of the app meet it.";
    } else if (gateOnly) {
      link.hidden = true;
      link.removeAttribute("href");
      note.textContent = routes.length
        ? "The gate routing here serves no waiting room of its own (start it with --queue-api, the address of queue-api)."
        : "People admitted from this queue go on to " + admit + ", which only the gate serves, and no running gate routes to this queue: open the room through the gate's address instead.";
    } else {
      link.href = "./?queue=" + encodeURIComponent(q);
      link.hidden = false;
      note.textContent = "";
    }
  }

  // Every running gate with its settings.
  function showGates() {
    const box = $("gates-list");
    box.textContent = "";
    const list = (gates && gates.gates) || [];
    $("gates-none").hidden = list.length > 0;
    for (const g of list) {
      const d = document.createElement("details");
      const s = document.createElement("summary");
      s.textContent = g.instance + " — " + (g.mode === "proxy" ? "in front of the app" : "asked by your proxy") +
        ", " + (g.routes || []).length + " route" + ((g.routes || []).length === 1 ? "" : "s");
      d.append(s);
      const dl = document.createElement("dl");
      const row = (term, value) => {
        const dt = document.createElement("dt");
        dt.textContent = term;
        const dd = document.createElement("dd");
        dd.textContent = value;
        dl.append(dt, dd);
      };
      const list = (a) => (a && a.length ? a.join(", ") : "none");
      const sess = g.sessions || {};
      const dur = g.durability || {};
      row("Mode", g.mode === "proxy" ? "Reverse proxy: the gate is in front of the app" : "Forward auth: your proxy asks the gate about each request");
      row("Listening on", g.listen || "—");
      row("Public address", g.publicUrl || "not set: links use the address it listens on");
      row("Routes", (g.routes || []).map((r) => where(r) + " → queue " + r.queue + (r.staticAssets ? " (static files wait too)" : "")).join("; ") || "none");
      row("Requests no route matches", g.unmatched ? "wait in queue " + g.unmatched : "pass without waiting");
      row("Waiting room", g.waitingRoom + (g.servesRoom ? " (served by the gate)" : ""));
      row("Paths that never wait", list(g.bypass && g.bypass.paths));
      row("Networks that never wait", list(g.bypass && g.bypass.networks));
      row("File types that never wait", list(g.bypass && g.bypass.staticExtensions));
      row("Staff pass (secret header or cookie)", g.bypass && g.bypass.secret ? "set" : "not set");
      row("Someone idle this long leaves", formatMs(sess.idleMs));
      row("Longest visit", sess.maxSessionMs ? formatMs(sess.maxSessionMs) : "no limit");
      for (const [q, v] of Object.entries(g.queues || {})) {
        row("Queue " + q, "idle " + formatMs(v.idleMs) + ", longest visit " + (v.maxSessionMs ? formatMs(v.maxSessionMs) : "no limit"));
      }
      row("Admission pass lasts", formatMs(g.tokenTtlMs));
      row("Presence reported every", formatMs(g.tickMs));
      row("Cookie", g.cookie ? g.cookie.name + (g.cookie.domain ? " for " + g.cookie.domain : " (this host only)") : "—");
      row("Lets everyone in when the store is unreachable for", g.failOpenMs ? formatMs(g.failOpenMs) : "never");
      row("Claims kept on replicas", dur.replicas ? dur.replicas + " (wait up to " + formatMs(dur.timeoutMs) + (dur.aof ? ", written to disk" : "") + ")" : "not waited for");
      row("Version", g.version || "—");
      row("Started", g.startedAtMs ? when(g.startedAtMs) : "—");
      row("Last heard from", g.seenAtMs ? when(g.seenAtMs) : "—");
      d.append(dl);
      box.append(d);
    }
  }

  // Lines for waiting, inside and tickets out over the last minutes.
  function drawChart(points) {
    const svg = $("chart");
    const NS = "http://www.w3.org/2000/svg";
    svg.textContent = "";
    const W = 600, H = 180, L = 44, R = 8, T = 10, B = 24;
    const now = Date.now();
    // From the first reading (at most 10 minutes back, at least one minute shown).
    const span = Math.min(HISTORY_MS, Math.max(60_000, now - (points[0]?.at ?? now)));
    const from = now - span;
    const max = Math.max(1, ...points.map((p) => Math.max(p.waiting, p.inside, p.ticketsOut)));
    const x = (at) => L + ((at - from) / span) * (W - L - R);
    const y = (v) => T + (1 - v / max) * (H - T - B);
    const el = (name, attrs, text) => {
      const e = document.createElementNS(NS, name);
      for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
      if (text != null) e.textContent = text;
      svg.append(e);
      return e;
    };
    el("line", { x1: L, y1: y(0), x2: W - R, y2: y(0), class: "axis" });
    el("line", { x1: L, y1: y(max), x2: W - R, y2: y(max), class: "grid" });
    el("text", { x: L - 4, y: y(max) + 4, "text-anchor": "end", class: "label" }, number(max));
    el("text", { x: L - 4, y: y(0) + 4, "text-anchor": "end", class: "label" }, "0");
    el("text", { x: L, y: H - 6, class: "label" }, Math.round(span / 60_000) + " min ago");
    el("text", { x: W - R, y: H - 6, "text-anchor": "end", class: "label" }, "now");
    const series = [["waiting", "Waiting"], ["inside", "Inside"], ["ticketsOut", "Tickets out"]];
    series.forEach(([key, name], i) => {
      if (points.length) {
        el("polyline", { points: points.map((p) => x(p.at).toFixed(1) + "," + y(p[key]).toFixed(1)).join(" "), class: "series s" + i });
      }
      el("text", { x: L + 8 + i * 110, y: T + 12, class: "legend s" + i }, name);
    });
    const last = points[points.length - 1];
    svg.setAttribute("aria-label", last
      ? "Now " + number(last.waiting) + " waiting, " + number(last.inside) + " inside, " + number(last.ticketsOut) + " tickets out"
      : "No data yet");
  }

  $("signin-form").addEventListener("submit", (e) => { e.preventDefault(); signIn($("token").value); });
  $("signout").addEventListener("click", () => signOut("Signed out."));
  $("settings-form").addEventListener("submit", saveSettings);
  $("codes-form").addEventListener("submit", addCodes);
  $("brand-form").addEventListener("submit", saveBrand);
  $("opening-form").addEventListener("submit", scheduleOpening);
  $("sale-form").addEventListener("submit", saveSale);
  $("message-form").addEventListener("submit", (e) => { e.preventDefault(); saveMessage($("f-text").value); });
  $("clear-message").addEventListener("click", () => saveMessage(""));
  $("cancel-opening").addEventListener("click", () => send($("opening-form"), "PUT", "", { opens_at: 0 }, "No opening scheduled."));
  $("pause").addEventListener("click", () => action("pause"));
  $("resume").addEventListener("click", () => action("resume"));
  $("open-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const q = $("open-queue").value.trim();
    $("open-error").textContent = /^[A-Za-z0-9._:-]{1,64}$/.test(q) ? "" : "A queue name is 1 to 64 letters, digits or . _ : -";
    if (!$("open-error").textContent) create(q);
  });
  $("delete").addEventListener("click", remove);
  let typing = null;
  $("search").addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => { search = $("search").value.trim(); offset = 0; refresh(); }, 300);
  });
  $("search-form").addEventListener("submit", (e) => {
    e.preventDefault();
    clearTimeout(typing);
    search = $("search").value.trim();
    offset = 0;
    refresh();
  });
  $("prev").addEventListener("click", () => { offset = Math.max(0, offset - PAGE); refresh(); });
  $("next").addEventListener("click", () => { if (offset + PAGE < total) { offset += PAGE; refresh(); } });
  if (token()) signIn(token());
})();
