# Sourced by bench scripts (after `root` is set to the repository):
#   port          prints a free loopback port
#   wait_valkey P waits (10 s at most) until valkey-server on port P answers
#   start_valkey  starts valkey-server with the module (target/release) on a free
#                 loopback port, in a fresh directory, and waits until it answers;
#                 sets dir, vport and vpid. The caller's EXIT trap kills $vpid and
#                 removes $dir.
#   start_local_stack [run-local.sh options]
#                 the whole system (scripts/run-local.sh) on free ports, waited for
#                 until queue-api's /healthz says Valkey is up (10 min at most); sets
#                 VALKEY_PORT, API_PORT, CHAT_PORT, MANAGER_PORT (exported), stack
#                 (its pid) and log. The caller's EXIT trap kills $stack, waits for it
#                 and removes $log.
#   build_test CRATE TEST
#                 valkey-server installed when missing (scripts/install-deps.sh), the
#                 module and the release test CRATE/TEST built (in $root, whatever
#                 the working directory), so that a run's time is the test's own
#   run_test CRATE TEST PATTERN [test arguments]
#                 runs that test (its environment from the caller's), printing the
#                 lines of its output that match the extended regex PATTERN; returns 1
#                 when the test failed
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_valkey() {
  for _ in $(seq 100); do valkey-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.1; done
  return 1
}
start_valkey() {
  dir=$(mktemp -d); vport=$(port)
  valkey-server --port "$vport" --bind 127.0.0.1 --save '' --dir "$dir" --logfile "$dir/valkey.log" \
    --loadmodule "${MODULE_SO:-$root/target/release/libvalkey_queue.so}" "$@" & vpid=$!
  wait_valkey "$vport" && return 0
  echo "valkey-server did not start (see $dir/valkey.log)" >&2; return 1
}
start_local_stack() {
  export VALKEY_PORT=$(port) API_PORT=$(port) CHAT_PORT=$(port) MANAGER_PORT=$(port)
  log=$(mktemp)
  bash "$root/scripts/run-local.sh" "$@" >"$log" 2>&1 & stack=$!
  for _ in $(seq 1200); do
    curl -sf "http://127.0.0.1:$API_PORT/healthz" 2>/dev/null | grep -q '"up"' && return 0
    kill -0 "$stack" 2>/dev/null || { cat "$log"; return 2; }
    sleep 0.5
  done
  echo "the local stack did not come up (log: $log)" >&2; return 2
}
build_test() {
  command -v valkey-server >/dev/null 2>&1 || bash "$root/scripts/install-deps.sh"
  (cd "$root" && cargo build --release -q -p valkey-queue && cargo test --release -q -p "$1" --test "$2" --no-run 2>/dev/null)
}
run_test() {
  local crate=$1 test=$2 pattern=$3; shift 3
  (cd "$root" && cargo test --release -q -p "$crate" --test "$test" -- --nocapture "$@") 2>&1 | grep -E "$pattern"
  return $(( PIPESTATUS[0] == 0 ? 0 : 1 ))
}
