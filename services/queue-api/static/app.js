"use strict";
// The waiting room's script. The page comes rendered in its language (the server
// chose it from ?lang= or Accept-Language); the messages of that language come from
// its messages file (data-messages), numbers, durations and times are formatted for
// it with Intl. Every URL is relative, so the page works under a path prefix (the
// gate serves it under /gate/room/). Nothing inline: the page is served with a
// Content-Security-Policy of default-src 'self'.
(() => {
  const $ = (id) => document.getElementById(id);
  const data = document.body.dataset;
  const queue = data.queue || "default";
  const lang = document.documentElement.lang || "en";
  const ticketTtl = Number(data.ticketTtl) || null;
  const params = new URLSearchParams(location.search);
  const returnTo = params.get("return");
  // "cookie": the browser carries the app's login (a cookie queue-api reads), so the
  // place is the account's: the page asks where it stands before offering the form,
  // on any device, and names no userId of its own.
  const identity = data.identity === "cookie";
  // "none": the queue asks no nickname (the gate's queues, or as its operator set):
  // the page enters by itself as it loads, with no form; the form (a button, the
  // access code) comes back only to join again after leaving or losing the place.
  const formless = data.nickname === "none";
  // A link may carry an access code (?code=): prefilled, its box opened.
  if (params.get("code") && $("code")) {
    $("code").value = params.get("code");
    if ($("code-box")) $("code-box").open = true;
  }

  let M = {};
  // A message with its {placeholders} filled in.
  const t = (key, vars) => (M[key] ?? key).replace(/\{(\w+)\}/g, (_, k) => String(vars?.[k] ?? ""));
  const number = (n) => new Intl.NumberFormat(lang).format(n);
  const percent = (f) => new Intl.NumberFormat(lang, { style: "percent", maximumFractionDigits: 0 }).format(f);
  const unit = (n, u) => new Intl.NumberFormat(lang, { style: "unit", unit: u, unitDisplay: "long" }).format(n);
  // "40 seconds", "3 minutes", "1 hour 5 minutes" (or "40초", "3분", ...).
  function duration(s) {
    if (s < 90) return unit(Math.max(0, Math.round(s)), "second");
    const m = Math.round(s / 60);
    if (m < 90) return unit(m, "minute");
    const h = Math.floor(m / 60), rest = m % 60;
    return rest ? unit(h, "hour") + " " + unit(rest, "minute") : unit(h, "hour");
  }
  const clock = (ms) => new Intl.DateTimeFormat(lang, { dateStyle: "medium", timeStyle: "short" }).format(new Date(ms));

  // Who this browser is in the queue, kept where every tab of it sees it (local
  // storage), with the place it had on entering (the progress bar runs from there to
  // the front): a reload, Back after admission, a bookmark or a second tab finds the
  // same person and asks where they stand before anything else. Only someone the
  // queue no longer knows is offered the form (queue-api's place cookie holds the
  // same on its side: an entry from this browser gets its place back).
  const saved = "waiting-room:" + queue;
  const savedEntry = saved + ":entry";
  const kept = {
    get: (k) => { try { return localStorage.getItem(k); } catch (_) { return null; } },
    set: (k, v) => { try { localStorage.setItem(k, v); } catch (_) { /* this page load only */ } },
    remove: (k) => { try { localStorage.removeItem(k); } catch (_) { /* nothing kept */ } },
  };
  // Set once the person is promoted or inside: nothing more to follow here.
  let settled = false;
  // Each follow() gets a new generation; anything older (a stream, a poll) stops.
  let generation = 0;
  let stream = null;
  // The latest total and pause the stream told (polls do not carry them).
  let total = null;
  let paused = false;
  let lastAnnounced = "";
  // The sale's state: "" (on), "closed" (ended) or "sold_out"; from the page as it
  // came, then from the stream's closed and soldOut events.
  let sale = data.sale || "";
  let closed = sale === "closed";
  let soldOut = sale === "sold_out";

  const who = (userId) => (userId ? "userId=" + encodeURIComponent(userId) + "&" : "") + "queue=" + encodeURIComponent(queue);
  const show_ = (el, on) => { el.hidden = !on; };

  function stopFollowing() {
    generation += 1;
    if (stream) { stream.close(); stream = null; }
  }

  // The other languages behind one disclosure (the current one's name as its
  // summary): one tab stop before the form and one line at 320 px, however many
  // languages there are.
  function languages() {
    const nav = $("languages");
    const tags = (data.languages || "").split(" ").filter(Boolean);
    if (tags.length < 2) return;
    const nameOf = (tag) => {
      try { return new Intl.DisplayNames([tag], { type: "language" }).of(tag); } catch (_) { return tag; }
    };
    const box = document.createElement("details");
    const summary = document.createElement("summary");
    summary.textContent = nameOf(lang);
    summary.lang = lang;
    const list = document.createElement("ul");
    for (const tag of tags) {
      const a = document.createElement("a");
      const p = new URLSearchParams(location.search);
      p.set("lang", tag);
      a.href = "?" + p.toString();
      a.lang = tag;
      a.hreflang = tag;
      a.textContent = nameOf(tag);
      if (tag === lang) a.setAttribute("aria-current", "true");
      const li = document.createElement("li");
      li.append(a);
      list.append(li);
    }
    box.append(summary, list);
    nav.append(box);
  }

  // The estimated wait: one figure, as the server rounded it to steps a person reads
  // (20 s steps under a minute, 30 s up to 3.5 minutes, whole minutes after: it
  // changes a few times a minute at most), never a range whose ends move with every
  // update. None yet: "Estimating your wait..." rather than a guess; "Nobody is being
  // let in" only when it is so: paused, or no estimate and this place not moved for
  // STILL_MS. The server gives no figure for the last seconds of a wait either (under
  // 15 s, faster than a figure can follow): after a short figure, "any moment now".
  const STILL_MS = 60000, SOON_AFTER = 40;
  let rankSeen = null, rankSince = 0, lastFigure = null;
  function waitText(s, rank) {
    const now = Date.now();
    if (rank !== rankSeen) { rankSeen = rank; rankSince = now; }
    if (paused) return t("paused");
    if (s == null) {
      if (now - rankSince >= STILL_MS) return t("nobody_let_in");
      return lastFigure != null && lastFigure <= SOON_AFTER ? t("soon") : t("estimating");
    }
    lastFigure = s;
    const wait = s >= 90 && s < 600 && s % 60 ? unit(Math.floor(s / 60), "minute") + " " + unit(s % 60, "second")
      : duration(s);
    return t("eta", { wait });
  }

  // Fair opening: before the queue opens, a pre-queue (rank 0, `opensAt`) shows
  // "opens in ..." and the commitment published for the draw, with a link to the proof
  // (`queue-cli verify` checks it after the opening).
  let openingTimer = null;
  let openingCommitment = null;
  function showOpening(standing) {
    if (openingTimer) { clearInterval(openingTimer); openingTimer = null; }
    const box = $("opening");
    if (standing.status !== "WAITING" || standing.opensAt == null) { box.textContent = ""; return false; }
    const proofUrl = "api/queue/opening?queue=" + encodeURIComponent(queue);
    const render = () => {
      const left = Math.max(0, Math.round((standing.opensAt - Date.now()) / 1000));
      box.textContent = "";
      const line = document.createElement("div");
      line.textContent = left > 0 ? t("opens_in", { wait: duration(left) }) + " " + t("opens_at", { time: clock(standing.opensAt) })
        : t("opening_now");
      box.append(line);
      if (openingCommitment) {
        const c = document.createElement("div");
        c.append(t("commitment") + " ");
        const code = document.createElement("code");
        code.textContent = openingCommitment;
        c.append(code, " (");
        const a = document.createElement("a");
        a.href = proofUrl;
        a.textContent = t("proof");
        c.append(a, ")");
        box.append(c);
      }
    };
    $("rank").textContent = "—";
    $("total").textContent = "";
    $("eta").textContent = "";
    show_($("next"), false);
    render();
    openingTimer = setInterval(render, 1000);
    if (!openingCommitment) {
      fetch(proofUrl).then((r) => r.json()).then((o) => { openingCommitment = o.commitment || null; render(); })
        .catch(() => {});
    }
    return true;
  }

  function show(standing) {
    show_($("wait"), true);
    if (typeof standing.totalWaiting === "number") total = standing.totalWaiting;
    if (typeof standing.admissionPaused === "boolean") paused = standing.admissionPaused;
    if (showOpening(standing)) { show_($("leave"), true); return; }
    if (standing.status !== "WAITING") return;
    const rank = standing.rank;
    const entry = Math.max(Number(kept.get(savedEntry)) || 0, rank);
    kept.set(savedEntry, String(entry));
    $("rank").textContent = number(rank);
    $("total").textContent = total != null ? t("total", { total: number(Math.max(total, rank)) }) : "";
    const done = entry > 0 ? (entry - rank) / entry : 0;
    $("progress").value = Math.round(done * 100);
    $("progress").setAttribute("aria-valuetext", t("progress_text", { percent: percent(done) }));
    $("progress-text").textContent = t("progress_text", { percent: percent(done) });
    show_($("next"), rank === 1 && !paused);
    $("eta").textContent = waitText(standing.estimatedWaitSeconds, rank);
    // Said once per change of place (the live region reads it out).
    const said = t("place_label") + ": " + number(rank) + (total != null ? " (" + $("total").textContent + ")" : "");
    if (said !== lastAnnounced) { lastAnnounced = said; $("announce").textContent = said; }
    // In a queue with lanes: the lane, and why the place can move back.
    const laneBox = $("lane");
    if (laneBox) {
      laneBox.textContent = standing.lane ? t("lane", { lane: standing.lane }) + " " + t("lane_note") : "";
      show_(laneBox, !!standing.lane);
    }
    show_($("leave"), true);
  }

  function admitUrl(standing) {
    const url = new URL(data.admitUrl || "/", location.href);
    url.searchParams.set("ticketId", standing.ticketId);
    url.searchParams.set("queue", queue);
    if (returnTo) url.searchParams.set("return", returnTo);
    return url;
  }

  // Waiting is over (their turn, or already inside): following stops, who they are
  // stays kept, the line's figures give way to `headline`.
  function settle(standing, headline) {
    stopFollowing();
    settled = true;
    if ($("sale")) show_($("sale"), false);
    kept.set(saved, standing.userId);
    kept.remove(savedEntry);
    show_($("enter"), false);
    show_($("wait"), true);
    show_($("leave"), false);
    show_($("next"), false);
    $("rank").textContent = headline;
    $("total").textContent = "";
    $("progress").value = 100;
    $("progress-text").textContent = "";
    $("eta").textContent = "";
  }

  // The person's turn. Who they are stays kept: coming back (Back, a second tab)
  // finds them promoted or inside, never a stranger to enter again.
  function admitted(standing) {
    settle(standing, t("your_turn"));
    const url = admitUrl(standing);
    const destination = url.host === location.host ? location.host : url.host;
    $("state").textContent = t("sending", { destination, ttl: ticketTtl ? duration(ticketTtl) : "—" });
    $("continue").href = url.toString();
    show_($("turn"), true);
    // Announced (the live region reads "sending"), and on at once: the ticket's time
    // runs from now, and a wait is what they came out of.
    $("announce").textContent = t("your_turn");
    location.assign(url.toString());
  }

  // Already inside (a session holds their place): no second entry; the way back to
  // where they were going, when the page knows it (a path on the admit URL's site).
  function inside(standing) {
    settle(standing, "—");
    $("state").textContent = t("inside");
    if (returnTo && /^\/(?![\/\\])/.test(returnTo)) {
      $("continue").href = new URL(returnTo, new URL(data.admitUrl || "/", location.href)).toString();
      show_($("turn"), true);
    }
  }

  // The sale's state shown: ended or sold out says so in place of the form (nobody
  // new gets in); sold out offers to leave to whoever still waits.
  function showSale() {
    sale = closed ? "closed" : soldOut ? "sold_out" : "";
    const box = $("sale");
    const waiting = !!kept.get(saved) && !settled;
    // A replaced template made before the sale's states may lack the box.
    if (box) {
      box.textContent = closed ? t("sale_closed") : soldOut ? t(waiting ? "sold_out_waiting" : "sold_out") : "";
      show_(box, !!sale);
    }
    if (sale && !waiting) show_($("enter"), false);
    document.body.dataset.sale = sale;
  }

  // The operator's message: shown as it changes, gone when cleared.
  function showNotice(text) {
    const box = $("notice"), line = $("notice-text");
    if (!box || !line) return; // a replaced template without the message's box
    line.textContent = text || "";
    show_(box, !!text);
  }

  // A branding change while the page is open: the new title, text, logo and colours.
  function applyBrand(brand) {
    const title = brand.title || t("title");
    const heading = $("title"), intro = $("intro"), logo = $("logo");
    if (heading) heading.textContent = title;
    document.title = title;
    if (brand.message && intro) intro.textContent = brand.message;
    if (logo && brand.logo_url) { logo.setAttribute("src", brand.logo_url); show_(logo, true); }
    else if (logo) { logo.removeAttribute("src"); show_(logo, false); }
    const root = document.documentElement.style;
    for (const [k, v] of [["accent", "--accent"], ["background", "--background"]]) {
      if (brand[k]) root.setProperty(v, brand[k]); else root.removeProperty(v);
    }
  }

  function outOfLine(message) {
    stopFollowing();
    settled = false;
    kept.remove(saved);
    kept.remove(savedEntry);
    show_($("leave"), false);
    show_($("next"), false);
    $("rank").textContent = "—";
    $("total").textContent = "";
    $("eta").textContent = "";
    $("state").textContent = message;
    show_($("enter"), !sale);
    showSale();
  }

  const lost = () => outOfLine(t("lost"));

  // Push updates. When the stream breaks, ask at once, then every few seconds, and
  // open the stream again a little later. The place is kept as long as the stream is
  // open or a request arrives within the queue's abandon_after (3 minutes by default):
  // a tab in the background, whose timers the browser may hold back to one a minute,
  // keeps it through the stream alone, or through a poll a minute at worst.
  function follow(userId) {
    stopFollowing();
    const mine = generation;
    kept.set(saved, userId);
    show_($("enter"), false);
    show_($("wait"), true);
    const es = new EventSource("api/queue/stream?" + who(userId));
    stream = es;
    es.addEventListener("position", (e) => show(JSON.parse(e.data)));
    es.addEventListener("promoted", (e) => admitted(JSON.parse(e.data)));
    es.addEventListener("unknown", () => lost());
    es.addEventListener("active", (e) => inside(JSON.parse(e.data)));
    es.addEventListener("closed", (e) => { closed = !!JSON.parse(e.data).closed; showSale(); });
    es.addEventListener("soldOut", (e) => { soldOut = !!JSON.parse(e.data).soldOut; showSale(); });
    es.addEventListener("message", (e) => showNotice(JSON.parse(e.data).text));
    es.addEventListener("brand", (e) => applyBrand(JSON.parse(e.data).brand || {}));
    es.onerror = () => {
      if (stream !== es) return;
      es.close();
      stream = null;
      poll(userId, mine, Date.now() + 5000);
    };
  }

  async function poll(userId, mine, reopenAt) {
    if (mine !== generation) return;
    try {
      const r = await fetch("api/queue/status?" + who(userId));
      if (mine !== generation) return;
      if (r.status === 404) return lost();
      // The login lapsed while waiting: said so; the place is kept while it is renewed.
      if (r.status === 401) $("error").textContent = loginMessage(await r.json()) || "";
      if (r.ok) {
        $("error").textContent = "";
        const s = await r.json();
        if (s.status === "PROMOTED") return admitted(s);
        if (s.status === "ACTIVE") return inside(s);
        show(s);
      }
    } catch (_) { /* keep trying */ }
    if (mine !== generation) return;
    if (Date.now() >= reopenAt) return follow(userId);
    setTimeout(() => poll(userId, mine, reopenAt), 3000);
  }

  // A queue may ask a proof of work at entry (bot resistance): the answer 428 brings a
  // challenge, solved in a Web Worker (the page stays responsive) and sent along.
  function solve(challenge, difficulty) {
    return new Promise((resolve, reject) => {
      const w = new Worker("pow-worker.js");
      w.onmessage = (e) => { w.terminate(); resolve(e.data); };
      w.onerror = (e) => { w.terminate(); reject(e); };
      w.postMessage({ challenge, difficulty });
    });
  }
  // How long the last proof took, in ms (shown to tests; null when none was asked).
  window.lastProofMs = null;

  // The error codes the API answers (docs/http-api.md), each told in the page's
  // language; anything else is the caller's generic message, never the server's
  // English `message`.
  const errorKeys = {
    unknown_queue: "no_such_queue",
    code_invalid: "code_invalid",
    no_lanes: "code_not_taken",
    invalid: "error_nickname",
    bad_request: "error_request",
    too_large: "error_request",
    json_required: "error_request",
    rate_limited: "error_rate_limited",
    too_many_streams: "error_rate_limited",
    unavailable: "error_unavailable",
    line_full: "error_line_full",
    proof_required: "error_proof",
    proof_used: "error_proof",
    closed: "sale_closed",
    sold_out: "sold_out",
  };
  function errorMessage(body, fallback) {
    const login = loginMessage(body || {});
    if (login) return login;
    const key = errorKeys[body && body.error];
    return key ? t(key, { queue }) : t(fallback);
  }

  // The server takes a nickname of 1 to 32 bytes of UTF-8 (after trimming): the box
  // counts the same, so that a name the server would refuse (12 Korean syllables are
  // 36 bytes) is refused here, in the page's language. (maxlength counts UTF-16
  // units, never more than the bytes, so it only stops what is too long anyway.)
  const NICKNAME_MAX_BYTES = 32;
  const nicknameBytes = (s) => new TextEncoder().encode(s.trim()).length;
  function checkNickname() {
    const box = $("nickname");
    const tooLong = nicknameBytes(box.value) > NICKNAME_MAX_BYTES;
    box.setCustomValidity(tooLong ? t("error_nickname") : "");
    if (tooLong) $("error").textContent = t("error_nickname");
    else if ($("error").textContent === t("error_nickname")) $("error").textContent = "";
    return !tooLong;
  }

  async function enter() {
    $("error").textContent = "";
    if (!formless && !checkNickname()) { $("nickname").reportValidity(); return; }
    // Entering again with the id this browser was given is that person again, not a
    // second entry (queue-api's place cookie gives back a place still held).
    // With the app's login the account is the person: no userId is named. A formless
    // entry names no nickname (queue-api binds its place to this browser's cookie).
    const entry = { queue, userId: identity ? undefined : kept.get(saved) || undefined };
    if (!formless) entry.nickname = $("nickname").value;
    // An access code (typed, or from the link's ?code=) enters the code's lane.
    const codeField = $("code");
    const code = codeField ? codeField.value.trim() : "";
    if (code) entry.code = code;
    kept.remove(savedEntry);
    try {
      let r, body;
      for (let tries = 0; ; tries++) {
        r = await fetch("api/queue/entry", {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify(entry),
        });
        body = await r.json();
        if (r.status !== 428 || tries >= 3 || !body.challenge) break;
        $("state").textContent = t("checking");
        const started = performance.now();
        const nonce = await solve(body.challenge.challenge, body.challenge.difficulty);
        window.lastProofMs = Math.round(performance.now() - started);
        entry.pow = { challenge: body.challenge.challenge, nonce };
      }
      $("state").textContent = "";
      if (!r.ok) {
        // Closed or sold out meanwhile: the page says so in place of the form.
        if (body.error === "closed") closed = true;
        if (body.error === "sold_out") soldOut = true;
        if (closed || soldOut) {
          show_($("wait"), false);
          showSale();
          return;
        }
        $("error").textContent = errorMessage(body, "error_join");
        show_($("enter"), true);
        return;
      }
      show_($("enter"), false);
      show(body);
      if (body.status === "PROMOTED") admitted(body);
      else if (body.status === "ACTIVE") inside(body);
      else follow(body.userId);
    } catch (_) {
      $("error").textContent = t("error_network");
      show_($("enter"), true);
    }
  }

  // A page the browser prerenders (speculation rules, a guessed next page) runs its
  // script before anyone looks at it: a formless page waits until it is really shown
  // (document.prerendering false, prerenderingchange) before it enters, so that a
  // prerender nobody opens takes no place in line.
  function untilShown() {
    if (!document.prerendering) return Promise.resolve();
    return new Promise((resolve) => {
      document.addEventListener("prerenderingchange", () => resolve(), { once: true });
    });
  }

  // A formless page enters as it loads, one tab at a time (Web Locks, where the
  // browser has them): a second tab opened meanwhile finds the id the first one kept
  // and follows that place instead of entering again.
  async function enterOnce() {
    const once = async () => {
      const userId = kept.get(saved);
      if (userId && (await resume(userId))) return;
      show_($("enter"), false);
      $("state").textContent = t("joining");
      show_($("wait"), true);
      await enter();
    };
    if (navigator.locks) await navigator.locks.request(saved, once);
    else await once();
  }

  async function leave() {
    const userId = kept.get(saved);
    if (!userId) return;
    $("leave").disabled = true;
    try {
      const r = await fetch("api/queue/entry?" + who(userId), { method: "DELETE" });
      if (r.ok || r.status === 404) outOfLine(t("left"));
      else $("error").textContent = errorMessage(await r.json().catch(() => ({})), "error_leave");
    } catch (_) {
      $("error").textContent = t("error_network");
    }
    $("leave").disabled = false;
  }

  // The app's login is missing or refused (401): say so in the page's language.
  function loginMessage(body) {
    if (body.error === "identity_required") return t("login_required");
    if (body.error === "identity_invalid") return body.reason === "expired" ? t("login_expired") : t("login_invalid");
    if (body.error === "invite_only") return t("invite_only");
    return null;
  }

  // With the app's login: where does the account stand, whatever this browser kept?
  // In line or holding a ticket (from this device or another): resumed; unknown: the
  // form; no login or a refused one: said so, with the form (a login fixes it).
  async function resumeAccount() {
    try {
      const r = await fetch("api/queue/status?" + who(null));
      if (r.ok) {
        const s = await r.json();
        kept.set(saved, s.userId);
        if (s.status === "PROMOTED") return admitted(s);
        if (s.status === "ACTIVE") return inside(s);
        return follow(s.userId);
      }
      kept.remove(saved);
      kept.remove(savedEntry);
      if (r.status === 401) {
        const body = await r.json().catch(() => ({}));
        $("error").textContent = loginMessage(body) || "";
      }
    } catch (_) {
      $("error").textContent = t("error_network");
    }
    show_($("enter"), true);
  }

  // A place kept by this browser: where does it stand? Waiting: followed; promoted
  // (a ticket not used yet): on to the admit URL; inside: said so. Only a person the
  // queue no longer knows gets the form back.
  // Answers false only when the queue no longer knows the person and the page asks
  // no nickname: the caller then enters anew.
  async function resume(userId) {
    try {
      const r = await fetch("api/queue/status?" + who(userId));
      if (r.status === 404) {
        // Gone (or an id this browser's place cookie does not hold): forgotten.
        kept.remove(saved);
        kept.remove(savedEntry);
        if (formless) return false;
        show_($("enter"), true);
        return true;
      }
      if (r.ok) {
        const s = await r.json();
        if (s.status === "PROMOTED") { admitted(s); return true; }
        if (s.status === "ACTIVE") { inside(s); return true; }
      }
    } catch (_) { /* follow() keeps asking */ }
    follow(userId);
    return true;
  }

  // Handlers first (a form submitted before they are there would reload the page),
  // then the messages, then the place this browser keeps.
  function start() {
    // A kept place is asked about before the form is offered (no second entry); a
    // formless page shows no form, and no nickname box ever.
    if (identity || kept.get(saved) || formless) show_($("enter"), false);
    if (formless) {
      for (const el of [$("nickname"), $("nickname-label")]) if (el) show_(el, false);
      $("nickname").required = false;
    }
    // Back to a page kept in memory (the back/forward cache) shows it as it was left:
    // load it again, so that the place is asked about (and the gate can send someone
    // admitted straight back to the app).
    window.addEventListener("pageshow", (e) => { if (e.persisted) location.reload(); });
    const messages = fetch(data.messages).then((r) => r.json()).then((m) => { M = m; })
      .catch(() => { /* the keys then; the page's own text is rendered already */ });
    $("enter").addEventListener("submit", (e) => { e.preventDefault(); messages.then(enter); });
    $("nickname").addEventListener("input", () => messages.then(checkNickname));
    $("leave").addEventListener("click", leave);
    // Back in front: catch up at once rather than at the next (held back) timer.
    document.addEventListener("visibilitychange", () => {
      const userId = kept.get(saved);
      if (document.visibilityState === "visible" && userId && !stream && !settled) follow(userId);
    });
    const announce = document.createElement("div");
    announce.id = "announce";
    announce.className = "sr-only";
    $("live").prepend(announce);
    const logo = $("logo");
    if (logo.getAttribute("src")) {
      logo.addEventListener("error", () => show_(logo, false));
      show_(logo, true);
    }
    languages();
    if ($("notice") && $("notice-text")) show_($("notice"), !!$("notice-text").textContent);
    messages.then(async () => {
      const resumed = kept.get(saved);
      showSale();
      // Ended or sold out with no place kept here: nothing to enter; the page says so.
      if (sale && !resumed && !identity) { document.body.dataset.ready = "true"; return; }
      if (identity) await resumeAccount();
      else if (formless) { await untilShown(); await enterOnce(); }
      else if (resumed) await resume(resumed);
      document.body.dataset.ready = "true";
    });
  }

  start();
})();
