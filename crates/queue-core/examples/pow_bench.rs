//! Proof of work, the server's side and a native client's: how long checking one
//! solution takes (what queue-api spends per entry, before its one `SET NX`), and how
//! long solving one takes at a difficulty. `bash bench/pow.sh` runs it.
//!
//!   cargo run --release -p queue-core --example pow_bench -- [difficulty] [challenges] [rounds]

use queue_core::pow::{solve, Challenger};
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<u64> = std::env::args().skip(1).map(|a| a.parse().expect("numbers")).collect();
    let difficulty = args.first().copied().unwrap_or(16) as u8;
    let challenges = args.get(1).copied().unwrap_or(200) as usize;
    let rounds = args.get(2).copied().unwrap_or(5) as usize;
    let c = Challenger::new(b"bench secret");
    let now = 1_800_000_000_000;

    // Solve: a native client (queue-cli), one core.
    let mut solved = Vec::new();
    let mut solve_ms = Vec::new();
    for i in 0..challenges {
        let mut id = [0u8; 12];
        id[..8].copy_from_slice(&(i as u64).to_be_bytes());
        let ch = c.issue("launch", "203.0.113.7", difficulty, now, id);
        let t = Instant::now();
        let nonce = solve(&ch.challenge, difficulty);
        solve_ms.push(t.elapsed().as_secs_f64() * 1e3);
        solved.push((ch.challenge, nonce));
    }
    let mean = solve_ms.iter().sum::<f64>() / solve_ms.len() as f64;
    println!(
        "solve at {difficulty} bits, native, {challenges} challenges: mean {mean:.1} ms, median {:.1} ms, max {:.1} ms",
        median(solve_ms.clone()),
        solve_ms.iter().cloned().fold(0.0, f64::max)
    );

    // Check: every solution, many times over, per round.
    let per_round = 200_000;
    let mut ns = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        for k in 0..per_round {
            let (ch, nonce) = &solved[k % solved.len()];
            let ok = c.check("launch", "203.0.113.7", ch, nonce, difficulty, now + 1);
            assert!(ok.is_ok());
        }
        ns.push(t.elapsed().as_nanos() as f64 / per_round as f64);
    }
    let (lo, hi) = (ns.iter().cloned().fold(f64::MAX, f64::min), ns.iter().cloned().fold(0.0, f64::max));
    println!(
        "check one solution: median {:.2} us over {rounds} rounds of {per_round} (spread {:.2}-{:.2} us; goal <= 5 us)",
        median(ns) / 1e3,
        lo / 1e3,
        hi / 1e3
    );
}
