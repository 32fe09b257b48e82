// lowtide's player: one WebSocket per viewer, each unit decoded with WebCodecs and drawn the
// moment it is decoded. No jitter buffer: the server already sends only what can be shown in
// time, and any buffering here would add the latency the server works to remove.
// The messages are those of crates/lowtide-serve/src/viewer_wire.rs (big-endian).
"use strict";

(() => {
  const TAG_HELLO = 0x40, TAG_UNIT = 0x41, TAG_DROPPED = 0x42, TAG_END = 0x43;
  const TAG_SHOWN = 0x50, TAG_PROBLEM = 0x51;
  const UNIT_HEADER_LEN = 35;
  const MAX_PROBLEM_LEN = 256;
  const KIND_PARAMETER_SETS = 0, KIND_KEYFRAME = 1;
  const CODEC_H264 = 1, CODEC_H265 = 2;
  const CODEC_NAMES = { [CODEC_H264]: "H.264", [CODEC_H265]: "H.265" };
  const DROP_REASONS = { 1: "expired", 2: "dependency-broken", 3: "queue-full", 4: "upstream" };
  // More units than this waiting in the decoder (a third of a second at 30 fps) means it does
  // not keep up: showing them late is worse than skipping to the next keyframe.
  const MAX_DECODE_QUEUE = 10;
  const RECONNECT_MIN_MS = 500, RECONNECT_MAX_MS = 8000;
  // Units sent to the decoder and not yet shown; a decoder that swallows frames must not
  // make this grow without bound.
  const MAX_PENDING = 300;

  // The viewer's clock in µs since the Unix epoch, as the shown reports carry it.
  const nowUs = () => Math.round((performance.timeOrigin + performance.now()) * 1000);

  // Where to connect: `?ws=` overrides (tests); else /watch/<path> (or `/?path=<path>`) on
  // this page's host → ws(s)://the same host/live/<path>.
  function streamTarget() {
    const q = new URLSearchParams(location.search);
    const m = location.pathname.match(/^\/watch\/(.*)$/);
    const rawPath = m ? m[1] : encodeURI(q.get("path") || "");
    const path = decodeURIComponent(rawPath);
    if (q.get("ws")) return { url: q.get("ws"), path };
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    return { url: `${scheme}//${location.host}/live/${rawPath}`, path };
  }

  // ---- Annex-B ----

  // The NAL units of an Annex-B buffer: each {type, start, end} (the bytes after its start code).
  function nalUnits(b, codec) {
    const starts = [];
    for (let i = 0; i + 2 < b.length; i++) {
      if (b[i] === 0 && b[i + 1] === 0 && b[i + 2] === 1) {
        starts.push(i + 3);
        i += 2;
      }
    }
    return starts.map((s, k) => {
      let end = k + 1 < starts.length ? starts[k + 1] - 3 : b.length;
      while (end > s && b[end - 1] === 0) end--; // the next 4-byte start code's first zero
      const type = codec === CODEC_H265 ? (b[s] >> 1) & 0x3f : b[s] & 0x1f;
      return { type, start: s, end };
    });
  }

  const isParameterSet = (codec, t) => (codec === CODEC_H265 ? t >= 32 && t <= 34 : t === 7 || t === 8);
  const isSps = (codec, t) => (codec === CODEC_H265 ? t === 33 : t === 7);
  const isAud = (codec, t) => (codec === CODEC_H265 ? t === 35 : t === 9);

  const START_CODE = [0, 0, 0, 1];

  // The given NAL units of `b`, each behind a 4-byte start code.
  function annexB(b, nals) {
    const out = new Uint8Array(nals.reduce((n, u) => n + 4 + u.end - u.start, 0));
    let o = 0;
    for (const u of nals) {
      out.set(START_CODE, o);
      out.set(b.subarray(u.start, u.end), o + 4);
      o += 4 + u.end - u.start;
    }
    return out;
  }

  // The first bytes of a NAL unit without its emulation-prevention bytes (00 00 03 → 00 00).
  function rbsp(b, max) {
    const out = [];
    let zeros = 0;
    for (let i = 0; i < b.length && out.length < max; i++) {
      if (zeros >= 2 && b[i] === 3) {
        zeros = 0;
        continue;
      }
      out.push(b[i]);
      zeros = b[i] === 0 ? zeros + 1 : 0;
    }
    return out;
  }

  const hex2 = (x) => x.toString(16).toUpperCase().padStart(2, "0");

  // The WebCodecs codec string of a stream from its SPS NAL unit (header included).
  function codecString(codec, sps) {
    const r = rbsp(sps, 16);
    // H.264: profile_idc, the constraint flags and level_idc follow the 1-byte header.
    if (codec === CODEC_H264) return "avc1." + hex2(r[1]) + hex2(r[2]) + hex2(r[3]);
    // H.265 (ISO/IEC 14496-15 E.3): profile_tier_level follows the 2-byte header and one byte.
    const p = r.slice(3);
    let compat = ((p[1] << 24) | (p[2] << 16) | (p[3] << 8) | p[4]) >>> 0;
    let reversed = 0;
    for (let i = 0; i < 32; i++) {
      reversed = ((reversed << 1) | (compat & 1)) >>> 0;
      compat >>>= 1;
    }
    const constraints = p.slice(5, 11);
    while (constraints.length && constraints[constraints.length - 1] === 0) constraints.pop();
    return [
      "hev1", // parameter sets in band
      ["", "A", "B", "C"][p[0] >> 6] + (p[0] & 0x1f),
      reversed.toString(16).toUpperCase(),
      (p[0] & 0x20 ? "H" : "L") + p[11],
      ...constraints.map(hex2),
    ].join(".");
  }

  // ---- the page ----

  const target = streamTarget();
  const canvas = document.getElementById("video");
  // desynchronized: the canvas may reach the screen without waiting for the page's next
  // composited frame (a low-latency canvas where the platform has one).
  const ctx = canvas.getContext("2d", { alpha: false, desynchronized: true });
  const overlay = document.getElementById("overlay");
  const message = document.getElementById("message");

  const st = {
    state: "connecting",
    path: target.path,
    codec: 0,
    codecString: "",
    framesShown: 0,
    decoderErrors: 0,
    lastCaptureToShownUs: null, // null: the last frame carried no capture stamp
    lastServerToShownUs: null,
    dropped: {}, // reason name → units the server did not send
    clockOffsetUs: null, // server − viewer at the hello, transit included
    nextTryAt: 0,
  };
  // The last second's shown frames: {at: shown_us, c2s: capture-to-shown µs or null}.
  const recent = [];

  let ws = null;
  let reconnectMs = RECONNECT_MIN_MS;
  let decoder = null;
  let configuredCodec = null;
  let parameterSets = null; // the latest SPS/PPS (VPS), Annex-B, for the next keyframe
  let sps = null; // the latest SPS NAL unit, for the codec string
  let needKey = true; // deltas are dropped until a keyframe starts a decodable run
  let checking = null; // {codec, units}: units held while isConfigSupported answers
  const supported = new Map(); // codec string → whether this browser decodes it
  const pending = new Map(); // index (the chunk's timestamp) → the unit's clocks

  function setState(s) {
    st.state = s;
    render();
  }

  function send(bytes) {
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(bytes);
  }

  function sendShown(index, decodedUs, shownUs) {
    const m = new DataView(new ArrayBuffer(25));
    m.setUint8(0, TAG_SHOWN);
    m.setBigUint64(1, BigInt(index));
    m.setBigUint64(9, BigInt(decodedUs));
    m.setBigUint64(17, BigInt(shownUs));
    send(m.buffer);
  }

  function sendProblem(text) {
    const b = new TextEncoder().encode(text);
    let end = Math.min(b.length, MAX_PROBLEM_LEN);
    // Cut at a character boundary: the server refuses text that is not UTF-8.
    while (end < b.length && end > 0 && (b[end] & 0xc0) === 0x80) end--;
    const m = new Uint8Array(1 + end);
    m[0] = TAG_PROBLEM;
    m.set(b.subarray(0, end), 1);
    send(m.buffer);
  }

  // ---- decoding ----

  function decoderConfig(codec) {
    // No `description`: the decoder reads the parameter sets in band (Annex-B).
    return { codec, optimizeForLatency: true, hardwareAcceleration: "no-preference" };
  }

  function onDecoderError(e) {
    st.decoderErrors++;
    sendProblem(`${e.name || "Error"}: ${e.message || e}`);
    // A decoder that failed is closed; a new one starts at the next keyframe.
    if (decoder && decoder.state !== "closed") decoder.close();
    decoder = null;
    configuredCodec = null;
    checking = null;
    pending.clear();
    needKey = true;
    setState("waiting for keyframe");
  }

  function onFrame(frame) {
    const decodedUs = nowUs();
    const index = frame.timestamp;
    if (canvas.width !== frame.displayWidth || canvas.height !== frame.displayHeight) {
      canvas.width = frame.displayWidth;
      canvas.height = frame.displayHeight;
    }
    ctx.drawImage(frame, 0, 0);
    // Closed at once: a decoder has few frames to lend, and holding one stalls it.
    frame.close();
    const shownUs = nowUs();
    const u = pending.get(index);
    pending.delete(index);
    if (!u) return; // a frame from before a reset
    sendShown(index, decodedUs, shownUs);
    st.framesShown++;
    st.lastCaptureToShownUs = u.captureUs ? shownUs - u.captureUs : null;
    st.lastServerToShownUs = shownUs - u.sentUs;
    recent.push({ at: shownUs, c2s: st.lastCaptureToShownUs });
    if (st.state !== "live") setState("live");
  }

  // Drops everything queued in the decoder and waits for the next keyframe: used when the
  // decoder falls behind or the page was hidden, so the viewer sees live, not late, video.
  function skipToLive() {
    if (decoder && decoder.state === "configured") decoder.reset(); // → unconfigured
    configuredCodec = null;
    checking = null;
    pending.clear();
    needKey = true;
    if (st.state === "live" || st.state === "decoding") setState("waiting for keyframe");
  }

  function decode(u) {
    pending.set(u.index, u);
    if (pending.size > MAX_PENDING) pending.delete(pending.keys().next().value);
    try {
      if (!decoder) decoder = new VideoDecoder({ output: onFrame, error: onDecoderError });
      if (configuredCodec !== u.codec) {
        decoder.configure(decoderConfig(u.codec));
        configuredCodec = u.codec;
      }
      decoder.decode(new EncodedVideoChunk({ type: u.key ? "key" : "delta", timestamp: u.index, data: u.data }));
    } catch (e) {
      onDecoderError(e);
    }
  }

  // The codec's support is asked once per codec string; the units that arrive meanwhile wait.
  function checkSupport(u) {
    const codec = u.codec;
    checking = { codec, units: [u] };
    VideoDecoder.isConfigSupported(decoderConfig(codec))
      .then((r) => r.supported, () => false)
      .then((ok) => {
        supported.set(codec, ok);
        if (!checking || checking.codec !== codec) return;
        const units = checking.units;
        checking = null;
        if (!ok) return unsupported(codec);
        message.textContent = "";
        units.forEach(decode);
      });
  }

  function unsupported(codec) {
    needKey = true;
    message.textContent = `This browser cannot decode ${CODEC_NAMES[st.codec] || "this codec"} (${codec}).`;
    setState("unsupported codec");
  }

  function onUnit(view, buf) {
    const index = Number(view.getBigUint64(1));
    const kind = view.getUint8(9);
    const captureUs = Number(view.getBigUint64(11));
    const sentUs = Number(view.getBigUint64(27));
    const data = new Uint8Array(buf, UNIT_HEADER_LEN);
    const nals = nalUnits(data, st.codec);
    const ps = nals.filter((n) => isParameterSet(st.codec, n.type));
    if (ps.length) {
      parameterSets = annexB(data, ps);
      const s = ps.find((n) => isSps(st.codec, n.type));
      if (s) sps = data.slice(s.start, s.end);
    }
    if (kind === KIND_PARAMETER_SETS || !CODEC_NAMES[st.codec]) return;
    const key = kind === KIND_KEYFRAME;
    // A hidden page draws nothing; when it shows again it starts from a keyframe.
    if (document.hidden) {
      if (!needKey) skipToLive();
      return;
    }
    if (decoder && decoder.decodeQueueSize > MAX_DECODE_QUEUE) skipToLive();
    if (!key && needKey) return;
    // A delta decodes with the codec of the keyframe that began its run.
    const u = { index, key, captureUs, sentUs, data, codec: st.codecString };
    if (key) {
      if (!sps) return setState("waiting for parameter sets");
      // The decoder reads SPS/PPS in band: they go first in the keyframe's chunk (after an
      // access unit delimiter, which must stay first), unless the keyframe carries its own.
      if (!ps.length) {
        const aud = nals.length && isAud(st.codec, nals[0].type) ? [nals[0]] : [];
        const rest = annexB(data, nals.slice(aud.length));
        const head = annexB(data, aud);
        u.data = new Uint8Array(head.length + parameterSets.length + rest.length);
        u.data.set(head, 0);
        u.data.set(parameterSets, head.length);
        u.data.set(rest, head.length + parameterSets.length);
      }
      u.codec = codecString(st.codec, sps);
      st.codecString = u.codec;
      needKey = false;
      if (checking) checking = null; // a newer keyframe replaces the units held
      if (!supported.has(u.codec)) return checkSupport(u);
      if (!supported.get(u.codec)) return unsupported(u.codec);
      if (st.state !== "live") setState("decoding");
    }
    if (checking) return checking.units.push(u);
    decode(u);
  }

  // ---- the connection ----

  function onMessage(buf) {
    const view = new DataView(buf);
    if (view.byteLength < 1) return;
    const tag = view.getUint8(0);
    if (tag === TAG_UNIT && view.byteLength >= UNIT_HEADER_LEN) {
      onUnit(view, buf);
    } else if (tag === TAG_HELLO && view.byteLength >= 12) {
      const version = view.getUint8(1);
      st.codec = view.getUint8(2);
      st.clockOffsetUs = Number(view.getBigUint64(3)) - nowUs();
      const len = view.getUint8(11);
      st.path = new TextDecoder().decode(new Uint8Array(buf, 12, Math.min(len, view.byteLength - 12)));
      reconnectMs = RECONNECT_MIN_MS;
      if (version !== 1) message.textContent = `The server speaks version ${version}; this page knows 1.`;
      if (!CODEC_NAMES[st.codec]) return unsupported(`codec byte ${st.codec}`);
      setState("waiting for keyframe");
    } else if (tag === TAG_DROPPED && view.byteLength >= 6) {
      const reason = DROP_REASONS[view.getUint8(5)] || `reason ${view.getUint8(5)}`;
      st.dropped[reason] = (st.dropped[reason] || 0) + view.getUint32(1);
    } else if (tag === TAG_END) {
      setState("ended");
    }
  }

  function stopPlayback() {
    if (decoder && decoder.state !== "closed") decoder.close();
    decoder = null;
    configuredCodec = null;
    checking = null;
    parameterSets = null;
    sps = null;
    pending.clear();
    needKey = true;
  }

  function connect() {
    setState("connecting");
    ws = new WebSocket(target.url);
    ws.binaryType = "arraybuffer";
    ws.onmessage = (ev) => onMessage(ev.data);
    ws.onclose = () => {
      stopPlayback();
      if (st.state !== "ended") st.state = "closed";
      // Back off, so a server that is down is not hammered by every viewer at once.
      st.nextTryAt = Date.now() + reconnectMs;
      setTimeout(connect, reconnectMs);
      reconnectMs = Math.min(reconnectMs * 2, RECONNECT_MAX_MS);
      render();
    };
  }

  document.addEventListener("visibilitychange", () => {
    if (document.hidden) skipToLive();
  });

  // ---- the overlay ----

  const ms = (us) => (us / 1000).toFixed(1);

  function render() {
    const now = nowUs();
    while (recent.length && recent[0].at < now - 1e6) recent.shift();
    const stamped = recent.filter((r) => r.c2s !== null).map((r) => r.c2s).sort((a, b) => a - b);
    const c2s =
      st.lastCaptureToShownUs === null
        ? "no stamp"
        : `last ${ms(st.lastCaptureToShownUs)} ms` +
          (stamped.length
            ? `  p50 ${ms(stamped[Math.floor(stamped.length / 2)])}  max ${ms(stamped[stamped.length - 1])} (1 s)`
            : "");
    const droppedTotal = Object.values(st.dropped).reduce((a, b) => a + b, 0);
    const reasons = Object.entries(st.dropped).map(([r, n]) => `${r} ${n}`).join(", ");
    let state = st.state;
    if ((state === "closed" || state === "ended") && st.nextTryAt > Date.now()) {
      state += `, retry in ${((st.nextTryAt - Date.now()) / 1000).toFixed(1)} s`;
    }
    overlay.textContent = [
      `${st.path || "(no path)"}  ${state}  ${CODEC_NAMES[st.codec] || ""} ${st.codecString}`,
      `capture→shown  ${c2s}`,
      `server→shown   ${st.lastServerToShownUs === null ? "-" : `last ${ms(st.lastServerToShownUs)} ms`}`,
      `shown          ${recent.length} fps  (${st.framesShown} in all)`,
      `server dropped ${droppedTotal}${reasons ? ` (${reasons})` : ""}`,
      `decoder errors ${st.decoderErrors}`,
      st.clockOffsetUs === null ? "" : `server clock − ours ≈ ${ms(st.clockOffsetUs)} ms at hello`,
    ].join("\n");
  }

  // For tests and curious viewers: read-only numbers.
  window.lowtidePlayer = Object.freeze({
    get state() { return st.state; },
    get path() { return st.path; },
    get codec() { return st.codecString; },
    get framesShown() { return st.framesShown; },
    get decoderErrors() { return st.decoderErrors; },
    get lastLatencyMs() { return st.lastCaptureToShownUs === null ? null : st.lastCaptureToShownUs / 1000; },
    get lastServerToShownMs() { return st.lastServerToShownUs === null ? null : st.lastServerToShownUs / 1000; },
    get droppedByServer() { return { ...st.dropped }; },
  });

  if (typeof VideoDecoder === "undefined") {
    message.textContent = "This browser has no WebCodecs VideoDecoder (it needs a secure context: https or localhost).";
    setState("unsupported browser");
    return;
  }
  setInterval(render, 250);
  connect();
})();
