//! The module's ticket id source: one ChaCha stream seeded from the OS at first use.

use queue_core::ticket::TicketIds;
use std::cell::RefCell;

thread_local! {
    static IDS: RefCell<Option<TicketIds>> = const { RefCell::new(None) };
}

pub fn next_ticket_id() -> String {
    IDS.with(|cell| {
        let mut slot = cell.borrow_mut();
        let ids = slot.get_or_insert_with(|| {
            let mut seed = [0u8; 32];
            getrandom::fill(&mut seed).expect("the OS random source works");
            TicketIds::from_seed(seed)
        });
        ids.next_id()
    })
}
