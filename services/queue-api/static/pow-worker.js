"use strict";
// SHA-256 (FIPS 180-4) over the challenge, ":" and a decimal nonce, counting up from
// 0 until the hash starts with `difficulty` zero bits. The challenge's full 64-byte
// blocks are hashed once; each nonce costs one or two more blocks.
const K = new Int32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);
const IV = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];
const W = new Int32Array(64);
const rotr = (x, n) => (x >>> n) | (x << (32 - n));

// One block of `bytes` at `at` into the state `H`.
function compress(H, bytes, at) {
  for (let t = 0; t < 16; t++) {
    const i = at + 4 * t;
    W[t] = (bytes[i] << 24) | (bytes[i + 1] << 16) | (bytes[i + 2] << 8) | bytes[i + 3];
  }
  for (let t = 16; t < 64; t++) {
    const a = W[t - 15], b = W[t - 2];
    const s0 = rotr(a, 7) ^ rotr(a, 18) ^ (a >>> 3);
    const s1 = rotr(b, 17) ^ rotr(b, 19) ^ (b >>> 10);
    W[t] = (W[t - 16] + s0 + W[t - 7] + s1) | 0;
  }
  let a = H[0], b = H[1], c = H[2], d = H[3], e = H[4], f = H[5], g = H[6], h = H[7];
  for (let t = 0; t < 64; t++) {
    const t1 = (h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[t] + W[t]) | 0;
    const t2 = ((rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) | 0;
    h = g; g = f; f = e; e = (d + t1) | 0; d = c; c = b; b = a; a = (t1 + t2) | 0;
  }
  H[0] = (H[0] + a) | 0; H[1] = (H[1] + b) | 0; H[2] = (H[2] + c) | 0; H[3] = (H[3] + d) | 0;
  H[4] = (H[4] + e) | 0; H[5] = (H[5] + f) | 0; H[6] = (H[6] + g) | 0; H[7] = (H[7] + h) | 0;
}

function solve(challenge, difficulty) {
  const prefix = new TextEncoder().encode(challenge + ":");
  const full = prefix.length - (prefix.length % 64);
  const mid = new Int32Array(IV);
  for (let at = 0; at < full; at += 64) compress(mid, prefix, at);
  const tail = prefix.subarray(full);
  const buf = new Uint8Array(128);
  const H = new Int32Array(8);
  const shift = 32 - difficulty;
  for (let n = 0; ; n++) {
    const digits = String(n);
    const len = tail.length + digits.length;
    buf.fill(0);
    buf.set(tail);
    for (let i = 0; i < digits.length; i++) buf[tail.length + i] = digits.charCodeAt(i);
    buf[len] = 0x80;
    const blocks = len + 9 > 64 ? 2 : 1;
    const bits = (prefix.length + digits.length) * 8;
    const end = blocks * 64;
    buf[end - 4] = bits >>> 24; buf[end - 3] = bits >>> 16; buf[end - 2] = bits >>> 8; buf[end - 1] = bits;
    H.set(mid);
    for (let b = 0; b < blocks; b++) compress(H, buf, 64 * b);
    if (difficulty === 0 || (difficulty >= 32 ? H[0] === 0 : (H[0] >>> shift) === 0)) return digits;
  }
}

onmessage = (e) => postMessage(solve(e.data.challenge, e.data.difficulty));
