# Sourced by bench scripts (after `root` is set to the repository):
#   port          prints a free loopback port
#   wait_valkey P waits (10 s at most) until valkey-server on port P answers
#   start_valkey  starts valkey-server with the module (target/release) on a free
#                 loopback port, in a fresh directory, and waits until it answers;
#                 sets dir, vport and vpid. The caller's EXIT trap kills $vpid and
#                 removes $dir.
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_valkey() {
  for _ in $(seq 100); do valkey-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.1; done
  return 1
}
start_valkey() {
  dir=$(mktemp -d); vport=$(port)
  valkey-server --port "$vport" --bind 127.0.0.1 --save '' --dir "$dir" --logfile "$dir/valkey.log" \
    --loadmodule "$root/target/release/libvalkey_queue.so" "$@" & vpid=$!
  wait_valkey "$vport" && return 0
  echo "valkey-server did not start (see $dir/valkey.log)" >&2; return 1
}
