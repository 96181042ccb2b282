//! The module's ticket secrets: one ChaCha stream seeded from the OS at first use.

use queue_core::ticket::{Secrets, SECRET_LEN};
use std::cell::RefCell;

thread_local! {
    static SECRETS: RefCell<Option<Secrets>> = const { RefCell::new(None) };
}

pub fn next_secret() -> [u8; SECRET_LEN] {
    SECRETS.with(|cell| {
        let mut slot = cell.borrow_mut();
        let secrets = slot.get_or_insert_with(|| {
            let mut seed = [0u8; 32];
            getrandom::fill(&mut seed).expect("the OS random source works");
            Secrets::from_seed(seed)
        });
        secrets.next_secret()
    })
}

/// An opening's seed: 32 bytes straight from the OS.
pub fn random_seed() -> [u8; 32] {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).expect("the OS random source works");
    seed
}
