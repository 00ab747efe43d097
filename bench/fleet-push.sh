#!/usr/bin/env bash
# Times `edgebench push` and `edgebench fetch` against a throwaway PostgreSQL on loopback:
#   1. one board database of ITERATIONS iterations and POWER power samples pushed; the same
#      iteration and power rows loaded by PostgreSQL's own binary `\copy` into a fresh schema
#      (printed: push / COPY, the share of COPY's rate push reaches); then fetched back into a
#      new SQLite file (rows/s), its counts checked against the board's;
#   2. BOARDS processes pushing distinct board databases at once (the same totals split over
#      the boards), then checks that the server's row counts equal the sum of the boards'.
# Usage: bench/fleet-push.sh [ITERATIONS=1000000] [POWER=5000000] [BOARDS=50] [TRIALS=100]
# EDGEBENCH_BIN=path skips `cargo build --release -j1`.
set -euo pipefail
ITER=${1:-1000000}
POWER=${2:-5000000}
BOARDS=${3:-50}
TRIALS=${4:-100}
cd "$(dirname "$0")/.."
if [ -z "${EDGEBENCH_BIN:-}" ]; then
    cargo build --release -j1 --locked
    EDGEBENCH_BIN=$PWD/target/release/edgebench
fi
BIN=$(realpath "$EDGEBENCH_BIN")
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -x "$PGBIN/initdb" ] || { echo "PostgreSQL server binaries missing: apt-get install postgresql" >&2; exit 1; }

work=$(mktemp -d)
chmod 755 "$work"
mkdir "$work/pg"
as_pg=()
if [ "$(id -u)" = 0 ]; then
    chown nobody:nogroup "$work/pg"
    as_pg=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"${as_pg[@]}" "$PGBIN/initdb" -D "$work/pg/data" -U postgres --auth=trust --no-sync >/dev/null
"${as_pg[@]}" "$PGBIN/postgres" -D "$work/pg/data" -p "$port" -k "$work/pg" \
    -c listen_addresses=127.0.0.1 -c max_connections=200 >"$work/server.log" 2>&1 &
server=$!
cleanup() { kill -INT "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
for _ in $(seq 100); do psql -h "$work/pg" -p "$port" -U postgres -Atqc 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.2; done
sql() { psql -h "$work/pg" -p "$port" -U postgres -d "$1" -X -Atqc "$2"; }
sql postgres "CREATE DATABASE one" && sql postgres "CREATE DATABASE fleet" && sql postgres "CREATE DATABASE raw"

# A real board file (one idle trial), grown to TRIALS trials with synthetic rows.
(cd "$work" && env -u EDGEBENCH_DB "$BIN" -q run --workload idle --duration 1s --db seed.db >/dev/null)
grow() { # grow OUT HOST ITERATIONS POWER
python3 - "$work/seed.db" "$1" "$2" "$3" "$4" "$TRIALS" <<'PY'
import shutil, sqlite3, sys, uuid
seed, out, host, iters, power, trials = sys.argv[1], sys.argv[2], sys.argv[3], *map(int, sys.argv[4:])
shutil.copy(seed, out)
c = sqlite3.connect(out)
cols = [r[1] for r in c.execute("PRAGMA table_info(trials)") if r[1] not in ("id", "uuid")]
(tid,) = c.execute("SELECT id FROM trials LIMIT 1").fetchone()
c.execute("UPDATE runs SET uuid = ?, host = ?", (str(uuid.uuid4()), host))
c.execute("UPDATE trials SET uuid = ? WHERE id = ?", (str(uuid.uuid4()), tid))
c.execute("DELETE FROM iterations"); c.execute("DELETE FROM power_samples")
ids = [tid]
for _ in range(trials - 1):
    c.execute(f"INSERT INTO trials (uuid, {', '.join(cols)}) SELECT ?, {', '.join(cols)} FROM trials WHERE id = ?", (str(uuid.uuid4()), tid))
    ids.append(c.execute("SELECT last_insert_rowid()").fetchone()[0])
for k, t in enumerate(ids):
    n = iters // trials + (1 if k < iters % trials else 0)
    c.executemany("INSERT INTO iterations (trial_id, step, epoch, loss, lr, data_s, step_s, t_start_ns, t_end_ns) VALUES (?,?,0,?,0.01,0.001,0.1,?,?)",
                  ((t, s, 7.0 / (s + 1), s * 1000, s * 1000 + 900) for s in range(n)))
    m = power // trials + (1 if k < power % trials else 0)
    c.executemany("INSERT INTO power_samples (trial_id, source, rail, t_ns, volts, amps, watts) VALUES (?,'ina3221','VDD_IN',?,5.0,1.0,?)",
                  ((t, s * 100, 5.0 + (s % 10) / 10) for s in range(m)))
    c.execute("UPDATE trials SET iterations_done = ? WHERE id = ?", (n, t))
c.commit()
PY
}
counts() { # the row counts of every pushed table, summed over the given files
python3 - "$@" <<'PY'
import sqlite3, sys
tables = ["runs", "trials", "iterations", "power_samples", "trial_memory", "run_provenance"]
tot = [0] * len(tables)
for f in sys.argv[1:]:
    c = sqlite3.connect(f)
    for i, t in enumerate(tables):
        q = "SELECT count(*) FROM trials WHERE status <> 'running'" if t == "trials" else f"SELECT count(*) FROM {t}"
        tot[i] += c.execute(q).fetchone()[0]
print(" ".join(map(str, tot)))
PY
}
server_counts() {
    for t in runs trials iterations power_samples trial_memory run_provenance; do
        sql "$1" "SELECT count(*) FROM edgebench.$t"
    done | paste -sd' '
}

echo "== one board: $ITER iterations, $POWER power samples, $TRIALS trials"
grow "$work/board.db" board "$ITER" "$POWER"
start=$(date +%s.%N)
"$BIN" -q push "postgres://postgres@127.0.0.1:$port/one?sslmode=disable" --db "$work/board.db"
end=$(date +%s.%N)
rows=$((ITER + POWER))
python3 -c "s=$end-$start; print(f'wall {s:.2f} s, {$rows/s:,.0f} iteration+power rows/s')"
echo "local:  $(counts "$work/board.db")"
echo "server: $(server_counts one)"
push_s=$(python3 -c "print($end-$start)")

# PostgreSQL's own binary COPY of the same iteration and power rows, into a fresh schema.
"$BIN" -q fleet init "postgres://postgres@127.0.0.1:$port/raw?sslmode=disable" >/dev/null
for t in iterations power_samples; do
    psql -h "$work/pg" -p "$port" -U postgres -d one -X -q \
        -c "\\copy edgebench.$t TO '$work/$t.bin' WITH (FORMAT binary)"
done
start=$(date +%s.%N)
psql -h "$work/pg" -p "$port" -U postgres -d raw -X -q -v ON_ERROR_STOP=1 \
    -c "\\copy edgebench.iterations FROM '$work/iterations.bin' WITH (FORMAT binary)" \
    -c "\\copy edgebench.power_samples FROM '$work/power_samples.bin' WITH (FORMAT binary)"
end=$(date +%s.%N)
python3 -c "s=$end-$start; p=$push_s; print(f'binary \\\\copy: wall {s:.2f} s, {$rows/s:,.0f} rows/s; push / COPY = {s/p:.2f}')"

echo "== fetch of that board into a new SQLite file"
start=$(date +%s.%N)
"$BIN" -q fetch "postgres://postgres@127.0.0.1:$port/one?sslmode=disable" --into "$work/fetched.db" >/dev/null
end=$(date +%s.%N)
python3 -c "s=$end-$start; print(f'wall {s:.2f} s, {$rows/s:,.0f} iteration+power rows/s')"
echo "fetched: $(counts "$work/fetched.db")"
if [ "$(counts "$work/fetched.db")" != "$(counts "$work/board.db")" ]; then
    echo "MISMATCH after fetch" >&2
    exit 1
fi

echo "== $BOARDS boards at once: $ITER iterations and $POWER power samples in all"
files=()
for i in $(seq "$BOARDS"); do
    grow "$work/b$i.db" "board$i" $((ITER / BOARDS)) $((POWER / BOARDS))
    files+=("$work/b$i.db")
done
start=$(date +%s.%N)
pids=()
for f in "${files[@]}"; do
    "$BIN" -q push "postgres://postgres@127.0.0.1:$port/fleet?sslmode=disable" --db "$f" >/dev/null &
    pids+=($!)
done
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=1; done
end=$(date +%s.%N)
python3 -c "s=$end-$start; print(f'wall {s:.2f} s, {$rows/s:,.0f} iteration+power rows/s over $BOARDS pushers')"
local_sum=$(counts "${files[@]}")
server_sum=$(server_counts fleet)
echo "local sum: $local_sum"
echo "server:    $server_sum"
if [ "$fail" != 0 ] || [ "$local_sum" != "$server_sum" ]; then
    echo "MISMATCH or failed push" >&2
    exit 1
fi
echo "counts equal"
