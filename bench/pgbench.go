package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/bench/internal/procstat"
	"github.com/idemgen/idemgen/bench/ledger"
)

// The pgbench scripts run the scenarios' SQL from the C client with
// prepared statements (-M prepared) like pgx's statement cache. Each client
// numbers its messages with :n (pgbench keeps a client's variables from one
// transaction to the next), so every key is new. The inbox script sends one
// statement per round trip. The protocol scripts send the statements of a
// round trip in one pipeline (\startpipeline … \endpipeline): pgbench
// queues them and sends them with one Sync, then reads every answer, as
// pgx's batches do.
var (
	pgbenchUpdate = strings.NewReplacer("$1", ":amount", "$2", ":aid").Replace(ledger.UpdateBalance) + ";\n"
	pgbenchBare   = "\\set aid random(1, :accounts)\n\\set amount random(1, 100)\n" + pgbenchUpdate
	pgbenchHead   = `\set aid random(1, :accounts)
\set amount random(1, 100)
\set n :n + 1
\set key :client_id * 1000000000 + :n
`
	pgbenchResult = `jsonb_build_object('account', (:aid)::bigint, 'amount', (:amount)::bigint)`
	pgbenchInbox  = pgbenchHead + `BEGIN;
INSERT INTO hand_inbox (key_message_id, fingerprint) VALUES ((:key)::text, sha256((:key)::text::bytea)) ON CONFLICT DO NOTHING RETURNING true;
` + pgbenchUpdate + `UPDATE hand_inbox SET status = 'done', result = ` + pgbenchResult + `, completed_at = now() WHERE key_message_id = (:key)::text;
COMMIT;
`
	// The claim-first protocol (WithPessimisticClaim): BEGIN and the
	// claim; the handler's UPDATE; the result and COMMIT. Three round
	// trips; the inbox row is written twice.
	pgbenchClaimFirst = pgbenchHead + `\startpipeline
BEGIN;
INSERT INTO hand_inbox (key_message_id, fingerprint) VALUES ((:key)::text, sha256((:key)::text::bytea)) ON CONFLICT DO NOTHING RETURNING true;
\endpipeline
` + pgbenchUpdate + `\startpipeline
UPDATE hand_inbox SET status = 'done', result = ` + pgbenchResult + `, completed_at = now() WHERE key_message_id = (:key)::text;
COMMIT;
\endpipeline
`
	// The optimistic protocol: BEGIN, the key's lookup and the handler's
	// UPDATE; then the row, written once with its result, and COMMIT. Two
	// round trips.
	pgbenchOptimisticInsert = `\startpipeline
INSERT INTO hand_inbox (key_message_id, fingerprint, status, result, completed_at) VALUES ((:key)::text, sha256((:key)::text::bytea), 'done', ` + pgbenchResult + `, now());
COMMIT;
\endpipeline
`
	pgbenchOptimistic = pgbenchHead + `\startpipeline
BEGIN;
SELECT fingerprint, status, result FROM hand_inbox WHERE key_message_id = (:key)::text;
` + pgbenchUpdate + `\endpipeline
` + pgbenchOptimisticInsert
	// The same without the lookup: what the read costs.
	pgbenchNoRead = pgbenchHead + `\startpipeline
BEGIN;
` + pgbenchUpdate + `\endpipeline
` + pgbenchOptimisticInsert
)

// pgbenchScripts are the pgbench scenarios' scripts.
var pgbenchScripts = map[string]string{scPgBare: pgbenchBare, scPgInbox: pgbenchInbox,
	scPgClaimFirst: pgbenchClaimFirst, scPgOptimistic: pgbenchOptimistic, scPgNoRead: pgbenchNoRead}

// pgbenchTrips are the round trips of one transaction of each script: one per
// statement outside a pipeline, one per pipeline (pgbench sends a
// pipeline's statements, then waits for their answers).
var pgbenchTrips = map[string]int{scPgBare: 1, scPgInbox: 5, scPgClaimFirst: 3, scPgOptimistic: 2, scPgNoRead: 2}

// pgbenchNames are the pgbench scenarios, in table order.
var pgbenchNames = []string{scPgBare, scPgInbox, scPgClaimFirst, scPgOptimistic, scPgNoRead}

// runPgbenchCell runs one pgbench script at the given concurrency in a fresh
// schema: a warm-up run, then the measured run with a per-transaction log.
func runPgbenchCell(ctx context.Context, cfg *config, name string, clients int) (sample, error) {
	script := pgbenchScripts[name]
	s, err := newSchema(ctx, cfg.db, cfg.accounts)
	if err != nil {
		return sample{}, err
	}
	defer s.drop()
	dir, err := os.MkdirTemp("", "idembench-pgbench-")
	if err != nil {
		return sample{}, err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "script.sql")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		return sample{}, err
	}
	env, err := pgbenchEnv(cfg.db, s.name)
	if err != nil {
		return sample{}, err
	}

	var clientCPU time.Duration
	// The measured run numbers its messages from 500,000,000: its keys are
	// not the warm-up's.
	run := func(d time.Duration, log bool) (float64, error) {
		n0 := "n=0"
		if log {
			n0 = "n=500000000"
		}
		args := []string{"-n", "-M", "prepared", "-f", file,
			"-c", strconv.Itoa(clients), "-j", strconv.Itoa(min(clients, 2)),
			"-T", strconv.Itoa(int(d.Round(time.Second) / time.Second)),
			"-D", "accounts=" + strconv.Itoa(cfg.accounts), "-D", n0}
		if log {
			args = append(args, "-l", "--log-prefix", filepath.Join(dir, "log"))
		}
		cmd := exec.CommandContext(ctx, cfg.pgbench, args...)
		cmd.Env = env
		cmd.Dir = dir
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return 0, fmt.Errorf("%s: %v\n%s", name, err, out.String())
		}
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			clientCPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
		m := tpsRE.FindSubmatch(out.Bytes())
		if m == nil && !log {
			// A warm-up that finished no transaction (a loaded
			// machine's slow connections) still warmed the server.
			return 0, nil
		}
		if m == nil {
			return 0, fmt.Errorf("%s: no tps in pgbench's output:\n%s", name, out.String())
		}
		return strconv.ParseFloat(string(m[1]), 64)
	}
	if _, err := run(max(cfg.warmup, time.Second), false); err != nil {
		return sample{}, err
	}
	meter := procstat.Start()
	tps, err := run(cfg.duration, true)
	if err != nil {
		return sample{}, err
	}
	_, busy := meter.Stop()
	lat, err := readPgbenchLogs(filepath.Join(dir, "log"))
	if err != nil {
		return sample{}, err
	}
	// pgbench reports tps over its own measured time; express the sample
	// in the same terms as the Go cells (messages and elapsed time).
	res := sample{msgs: int64(len(lat)), latencies: lat, trips: int64(pgbenchTrips[name] * len(lat)),
		clientCPU: clientCPU, serverCPU: -1, busy: busy}
	if tps > 0 {
		res.elapsed = time.Duration(float64(len(lat)) / tps * float64(time.Second))
	}
	return res, nil
}

var tpsRE = regexp.MustCompile(`(?m)^tps = ([0-9.]+)`)

// pgbenchEnv connects pgbench (libpq) to the database of url, on the schema.
func pgbenchEnv(url, schema string) ([]string, error) {
	c, err := pgconn.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	env := os.Environ()
	env = append(env,
		"PGHOST="+c.Host, "PGPORT="+strconv.Itoa(int(c.Port)), "PGDATABASE="+c.Database,
		"PGUSER="+c.User, "PGOPTIONS=-c search_path="+schema)
	if c.Password != "" {
		env = append(env, "PGPASSWORD="+c.Password)
	}
	return env, nil
}

// readPgbenchLogs reads the latencies of pgbench's per-transaction logs
// (prefix.PID and prefix.PID.N, one per thread): the third field of each
// line, in microseconds.
func readPgbenchLogs(prefix string) ([]time.Duration, error) {
	files, err := filepath.Glob(prefix + ".*")
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no pgbench log at %s.*", prefix)
	}
	var lat []time.Duration
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 3 {
				continue
			}
			us, err := strconv.ParseInt(fields[2], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %q: %v", f, sc.Text(), err)
			}
			lat = append(lat, time.Duration(us)*time.Microsecond)
		}
	}
	return lat, nil
}
