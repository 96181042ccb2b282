//! The gate declares its queues: at start it adds each route's queue (and the
//! unmatched requests' queue) to `queue-registry`, so that queue-api, which serves
//! only queues an operator declared, serves the waiting rooms the gate sends people
//! to.

mod common;

use common::*;
use std::time::Duration;
use testkit::{Backend, ValkeyServer};

testkit::backend_tests!(async the_routes_queues_are_declared_at_start);

fn registry(valkey: &ValkeyServer) -> Vec<String> {
    let mut members: Vec<String> = redis::cmd("SMEMBERS").arg("queue-registry").query(&mut valkey.conn()).unwrap();
    members.sort();
    members
}

async fn the_routes_queues_are_declared_at_start(b: Backend) {
    let mut valkey = ValkeyServer::start(b);
    assert!(registry(&valkey).is_empty());
    let p =
        Proxied::with(valkey, true, |c| c.rules.unmatched = queue_gate::rules::Unmatched::Queue("lobby".into())).await;
    let declared = eventually(Duration::from_secs(10), async || registry(&p.valkey).len() == 3).await;
    assert!(declared, "the gate's queues are in the registry: {:?}", registry(&p.valkey));
    assert_eq!(registry(&p.valkey), ["concert", "drop", "lobby"]);
    // Valkey flushed and back later: the gate declares them again when it starts.
    let Proxied { valkey: v, gate, .. } = p;
    gate.stop().await;
    valkey = v;
    let _: () = redis::cmd("FLUSHALL").query(&mut valkey.conn()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let gate = Gate::start(config(&valkey, None, &key_file(dir.path(), "k.pem"))).await;
    let declared = eventually(Duration::from_secs(10), async || registry(&valkey) == ["concert", "drop"]).await;
    assert!(declared, "{:?}", registry(&valkey));
    gate.stop().await;
}
