# Sourced by the bench-serve scripts: one `tierkv serve` at a time.
# start_serve NAME ARGS...: starts "$bin" serve --port 0 ARGS... with its
# output in $scratch/NAME.{out,err}; sets pid and url (once it listens).
# stop_serve: SIGTERM, then waits for it.
start_serve() {
  local name=$1
  shift
  "$bin" serve --port 0 "$@" > "$scratch/$name.out" 2> "$scratch/$name.err" &
  pid=$!
  for _ in $(seq 100); do grep -q 'http://' "$scratch/$name.out" 2>/dev/null && break; sleep 0.1; done
  url=$(grep -o 'http://[0-9.]*:[0-9]*' "$scratch/$name.out")
}

stop_serve() {
  kill -TERM "$pid"
  wait "$pid" || true
}
