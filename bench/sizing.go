package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/bench/internal/mdtable"
	"github.com/idemgen/idemgen/bench/internal/stats"
	"github.com/idemgen/idemgen/bench/ledger"
	"github.com/idemgen/idemgen/idem"
)

// The sizing part: what the inbox and the outbox cost in disk and in WAL.
//
//   - WAL per message: on one connection, cfg.walMsgs messages of each kind
//     delivered one after another, and the WAL records between the server's
//     position before and after that belong to the schema (walMeter, with
//     pg_walinspect: other users of the server write meanwhile). The kinds:
//     the bare UPDATE (no deduplication), a first delivery through the
//     generated wrapper, a duplicate, a first delivery whose handler
//     publishes 1 and 10 messages through the outbox (without NOTIFY), and
//     the relay publishing those outgoing rows and marking them published.
//     Each measurement repeats cfg.walRepeats times, interleaved; the median
//     counts.
//   - bytes per row: the rows those deliveries wrote are copied (new keys of
//     the same shape, new outgoing ids) until the inbox and the outbox hold
//     cfg.sizeRows rows each; after VACUUM ANALYZE, pg_relation_size of the
//     heap, of each index and of the TOAST table, over the rows.
//   - the cost of purging them: the copies are dated past the retention
//     (inbox rows 31 days old, outbox rows published 8 days ago), and one
//     RunOnce of idem.Janitor (30 days for the inbox, the consumer's
//     retain=; 7 days for the published outbox rows) purges them, timed,
//     with its WAL counted the same way.

// walKinds are the WAL measurements, in the order they run.
var walKinds = []string{walBare, walFirst, walDuplicate, walPub1, walPub10, walRelay}

const (
	walBare      = "bare UPDATE, no deduplication"
	walFirst     = "first delivery (generated wrapper)"
	walDuplicate = "duplicate"
	walPub1      = "first delivery publishing 1 message"
	walPub10     = "first delivery publishing 10 messages"
	walRelay     = "relay: publish and mark an outgoing row"
)

// relSize is one relation of a table and its size.
type relSize struct {
	name  string
	kind  string // heap, index, TOAST
	bytes int64
}

// tableSize is a table filled for the sizing.
type tableSize struct {
	table string
	rows  int64
	rels  []relSize
	total int64 // pg_total_relation_size: every fork, the indexes, TOAST
}

// sizingResults is what the sizing part measured.
type sizingResults struct {
	msgs    int                  // deliveries per WAL measurement
	wal     map[string][]float64 // bytes per message (per outgoing row for the relay), per repeat
	fpi     map[string][]float64 // of them, full-page images
	fill    time.Duration
	inbox   tableSize
	outbox  tableSize
	purged  map[string]int64 // rows the janitor purged, by table
	purge   idem.JanitorReport
	took    time.Duration
	purgeWA int64 // WAL bytes of the purge
	// inboxRetain and outboxRetain are the janitor's retentions.
	inboxRetain, outboxRetain time.Duration
}

// walPer returns the median of the bytes per message measured for kind.
func (s *sizingResults) walPer(kind string) float64 { return stats.Median(s.wal[kind]) }

// fpiPer returns the median of the full-page images' bytes per message.
func (s *sizingResults) fpiPer(kind string) float64 { return stats.Median(s.fpi[kind]) }

// walMeter counts the WAL of one schema's relations with pg_walinspect:
// of the records between two positions, those that touch a relation of the
// schema (its tables, indexes, TOAST), and every other record of the same
// transactions (their commit records). The WAL position is the whole
// server's, and others write on it meanwhile; this leaves them out.
type walMeter struct {
	fn   string // the schema-qualified pg_get_wal_records_info
	rels string // a regular expression matching the schema's relations in block_ref
	pool *pgxpool.Pool
}

// newWALMeter creates the extension pg_walinspect in schema (dropped with
// it) unless the database has it already, and finds the schema's relations.
// Call it after the migrations: relations created later are not counted.
func newWALMeter(ctx context.Context, pool *pgxpool.Pool, schema string) (*walMeter, error) {
	m := &walMeter{pool: pool}
	var ext string
	err := pool.QueryRow(ctx, `SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'pg_walinspect'`).Scan(&ext)
	if err != nil {
		if _, err := pool.Exec(ctx, `CREATE EXTENSION pg_walinspect SCHEMA `+schema); err != nil {
			return nil, fmt.Errorf("create extension pg_walinspect (PostgreSQL's contrib, a superuser): %w", err)
		}
		ext = schema
	}
	m.fn = ext + ".pg_get_wal_records_info"
	if err := pool.QueryRow(ctx, `
		SELECT 'rel [0-9]+/[0-9]+/(' || string_agg(pg_relation_filenode(c.oid)::text, '|') || ') '
		FROM pg_class c
		WHERE pg_relation_filenode(c.oid) IS NOT NULL AND (c.relnamespace = $1::regnamespace
		   OR c.oid IN (SELECT reltoastrelid FROM pg_class WHERE relnamespace = $1::regnamespace)
		   OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid IN (SELECT reltoastrelid FROM pg_class WHERE relnamespace = $1::regnamespace)))`, schema).Scan(&m.rels); err != nil {
		return nil, err
	}
	return m, nil
}

// position is the server's WAL position, flushed.
func (m *walMeter) position(ctx context.Context) (string, error) {
	var pos string
	err := m.pool.QueryRow(ctx, `SELECT pg_current_wal_flush_lsn()::text`).Scan(&pos)
	return pos, err
}

// between returns the bytes of the schema's WAL records between two
// positions, and of them the full-page images'.
func (m *walMeter) between(ctx context.Context, from, to string) (total, fpi int64, err error) {
	if from == to { // nothing written (pg_walinspect refuses a start at the flushed position)
		return 0, 0, nil
	}
	err = m.pool.QueryRow(ctx, `
		WITH recs AS (SELECT xid, record_length, fpi_length, block_ref ~ $3 AS ours FROM `+m.fn+`($1::pg_lsn, $2::pg_lsn)),
		     xids AS (SELECT DISTINCT xid FROM recs WHERE ours AND xid <> '0')
		SELECT COALESCE(sum(record_length), 0)::bigint, COALESCE(sum(fpi_length), 0)::bigint
		FROM recs WHERE ours OR (xid <> '0' AND xid IN (SELECT xid FROM xids))`, from, to, m.rels).Scan(&total, &fpi)
	return total, fpi, err
}

func runSizing(ctx context.Context, cfg *config) (*sizingResults, error) {
	s, err := newOutboxSchema(ctx, cfg.db, cfg.accounts)
	if err != nil {
		return nil, err
	}
	defer s.drop()
	pool, _, err := s.pool(ctx, 1)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	res := &sizingResults{msgs: cfg.walMsgs, wal: map[string][]float64{}, fpi: map[string][]float64{}, inboxRetain: 720 * time.Hour, outboxRetain: 7 * 24 * time.Hour}

	post := ledger.NewPostIdem(pool)
	pub1 := ledger.NewPublishingPost(pool, 1, idem.WithoutNotify())
	pub10 := ledger.NewPublishingPost(pool, 10, idem.WithoutNotify())
	wal, err := newWALMeter(ctx, pool, s.name)
	if err != nil {
		return nil, err
	}
	lsn := func() (string, error) { return wal.position(ctx) }
	// Keys of the shape the db part's workers use: m-<worker>-<seq>.
	msg := func(kind, rep, i int) ledger.Deposit {
		return ledger.Deposit{MessageID: "m-" + strconv.Itoa(10*rep+kind) + "-" + strconv.Itoa(i), Account: int64((i*7919)%cfg.accounts) + 1, Amount: int64(i%100) + 1}
	}
	for rep := range cfg.walRepeats {
		for ki, kind := range walKinds {
			var deliver func(i int) error
			n := cfg.walMsgs
			switch kind {
			case walBare:
				deliver = func(i int) error { _, err := ledger.Apply(ctx, pool, msg(ki, rep, i)); return err }
			case walFirst:
				deliver = func(i int) error { return expect(post.Handle(ctx, msg(ki, rep, i)))(idem.Processed) }
			case walDuplicate:
				// The first deliveries of this repeat, again.
				first := slices.Index(walKinds, walFirst)
				deliver = func(i int) error { return expect(post.Handle(ctx, msg(first, rep, i)))(idem.Duplicate) }
			case walPub1:
				deliver = func(i int) error { return expect(pub1.Handle(ctx, msg(ki, rep, i)))(idem.Processed) }
			case walPub10:
				deliver = func(i int) error { return expect(pub10.Handle(ctx, msg(ki, rep, i)))(idem.Processed) }
			case walRelay:
				n = 11 * cfg.walMsgs // the outgoing rows of the two kinds above
			}
			before, err := lsn()
			if err != nil {
				return nil, err
			}
			if kind == walRelay {
				if err := relayAll(ctx, s, n); err != nil {
					return nil, err
				}
			} else {
				for i := range n {
					if err := deliver(i); err != nil {
						return nil, fmt.Errorf("sizing, %s: %w", kind, err)
					}
				}
			}
			after, err := lsn()
			if err != nil {
				return nil, err
			}
			total, fpi, err := wal.between(ctx, before, after)
			if err != nil {
				return nil, err
			}
			res.wal[kind] = append(res.wal[kind], float64(total)/float64(n))
			res.fpi[kind] = append(res.fpi[kind], float64(fpi)/float64(n))
		}
		logf("sizing: WAL round %d of %d: %s", rep+1, cfg.walRepeats, res.describeWAL(rep))
	}

	logf("sizing: filling the inbox and the outbox to %d rows each", cfg.sizeRows)
	started := time.Now()
	// The copies: keys of the same shape (m-<worker>-<seq>, sixteen
	// workers), every other column from a real row, dated past the
	// retention.
	if _, err := pool.Exec(ctx, `WITH src AS (SELECT row_number() OVER () - 1 AS i, * FROM idem_bench_ledger), n AS (SELECT count(*) AS c FROM src)
		INSERT INTO idem_bench_ledger (key_message_id, fingerprint, status, result, attempts, created_at, completed_at)
		SELECT 'm-' || (g % 16) || '-' || (100000 + g / 16), src.fingerprint, src.status, src.result, src.attempts,
		       now() - interval '31 days' - g * interval '1 ms', now() - interval '31 days' - g * interval '1 ms'
		FROM n, generate_series(1, $1::int - (SELECT c FROM n)::int) g JOIN src ON src.i = g % (SELECT c FROM n)`, cfg.sizeRows); err != nil {
		return nil, fmt.Errorf("fill the inbox: %w", err)
	}
	if _, err := pool.Exec(ctx, `WITH src AS (SELECT row_number() OVER () - 1 AS i, * FROM idem_outbox), n AS (SELECT count(*) AS c FROM src)
		INSERT INTO idem_outbox (message_id, consumer, key, destination, ordering_key, headers, payload, created_at, available_at, published_at, attempts, last_error, claim_token, lease_until)
		SELECT gen_random_uuid(), src.consumer, src.key, src.destination, src.ordering_key, src.headers, src.payload,
		       now() - interval '8 days', now() - interval '8 days', now() - interval '8 days', src.attempts, src.last_error, src.claim_token, src.lease_until
		FROM n, generate_series(1, $1::int - (SELECT c FROM n)::int) g JOIN src ON src.i = g % (SELECT c FROM n)`, cfg.sizeRows); err != nil {
		return nil, fmt.Errorf("fill the outbox: %w", err)
	}
	for _, t := range []string{"idem_bench_ledger", "idem_outbox"} {
		if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+t); err != nil {
			return nil, err
		}
	}
	res.fill = time.Since(started)
	if res.inbox, err = measureTable(ctx, pool, "idem_bench_ledger"); err != nil {
		return nil, err
	}
	if res.outbox, err = measureTable(ctx, pool, "idem_outbox"); err != nil {
		return nil, err
	}
	logf("sizing: filled in %s; inbox %d rows, %s; outbox %d rows, %s", res.fill.Round(time.Millisecond),
		res.inbox.rows, mdtable.IEC(float64(res.inbox.total)), res.outbox.rows, mdtable.IEC(float64(res.outbox.total)))

	jpool, err := s.namedPool(ctx, 1, "idembench-janitor", nil)
	if err != nil {
		return nil, err
	}
	defer jpool.Close()
	j, err := idem.NewJanitor(jpool, []idem.Maintained{ledger.NewPostIdem(jpool)}, idem.WithJanitorOutbox(res.outboxRetain), idem.WithJanitorLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, err
	}
	before, err := lsn()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if res.purge, err = j.RunOnce(ctx); err != nil {
		return nil, fmt.Errorf("the janitor's purge: %w", err)
	}
	res.took = time.Since(t0)
	after, err := lsn()
	if err != nil {
		return nil, err
	}
	if res.purgeWA, _, err = wal.between(ctx, before, after); err != nil {
		return nil, err
	}
	res.purged = res.purge.Purged
	// The copies; the rows the three kinds of first delivery wrote are kept.
	wantInbox, wantOutbox := res.inbox.rows-3*int64(cfg.walRepeats*cfg.walMsgs), res.outbox.rows-int64(11*cfg.walRepeats*cfg.walMsgs)
	logf("sizing: the janitor purged %v in %s (%d statements, the longest %s), %s of WAL", res.purged, res.took.Round(time.Millisecond), res.purge.Statements, mdtable.Dur(res.purge.Longest), mdtable.IEC(float64(res.purgeWA)))
	if res.purged["idem_bench_ledger"] != wantInbox || res.purged["idem_outbox"] != wantOutbox {
		return nil, fmt.Errorf("the janitor purged %v, want %d inbox and %d outbox rows (the copies)", res.purged, wantInbox, wantOutbox)
	}
	return res, nil
}

// expect turns a delivery's result into an error unless its outcome is want.
func expect(_ ledger.Posted, outcome idem.Outcome, err error) func(want idem.Outcome) error {
	return func(want idem.Outcome) error {
		if err == nil && outcome != want {
			err = fmt.Errorf("outcome %v, want %v", outcome, want)
		}
		return err
	}
}

// relayAll runs one relay with a recording publisher until the n pending
// rows of the outbox are published and marked.
func relayAll(ctx context.Context, s *schema, n int) error {
	// A relay takes a connection to listen on, one for its statements and
	// one to renew its lease beside a publish.
	pool, _, err := s.pool(ctx, 3)
	if err != nil {
		return err
	}
	defer pool.Close()
	rec := newRecorder()
	relays := startRelays(ctx, pool, rec, 1, idem.WithRelayPollInterval(10*time.Millisecond))
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var pending int64
		if rec.distinct() >= n {
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM idem_outbox WHERE published_at IS NULL`).Scan(&pending); err != nil {
				_ = relays.stop()
				return err
			}
			if pending == 0 {
				return relays.stop()
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = relays.stop()
			return keepFirst(ctx.Err(), fmt.Errorf("the relay published %d of %d rows", rec.distinct(), n))
		}
		time.Sleep(time.Millisecond)
	}
}

// measureTable reads the rows of table and the size of its heap, of each of
// its indexes and of its TOAST table.
func measureTable(ctx context.Context, pool *pgxpool.Pool, table string) (tableSize, error) {
	t := tableSize{table: table}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&t.rows); err != nil {
		return t, err
	}
	rows, err := pool.Query(ctx, `
		SELECT c.relname, 'heap', pg_relation_size(c.oid), pg_total_relation_size(c.oid) FROM pg_class c WHERE c.oid = $1::regclass
		UNION ALL
		SELECT 'TOAST', 'TOAST', pg_relation_size(c.reltoastrelid) + COALESCE((SELECT sum(pg_relation_size(indexrelid)) FROM pg_index WHERE indrelid = c.reltoastrelid), 0), 0
		FROM pg_class c WHERE c.oid = $1::regclass AND c.reltoastrelid <> 0
		UNION ALL
		(SELECT i.relname, 'index', pg_relation_size(i.oid), 0 FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid WHERE x.indrelid = $1::regclass ORDER BY i.relname)`, table)
	if err != nil {
		return t, err
	}
	defer rows.Close()
	for rows.Next() {
		var r relSize
		var total int64
		if err := rows.Scan(&r.name, &r.kind, &r.bytes, &total); err != nil {
			return t, err
		}
		if r.kind == "heap" {
			t.total = total
		}
		t.rels = append(t.rels, r)
	}
	return t, rows.Err()
}

// describeWAL sums up one repeat's WAL measurements for the log.
func (s *sizingResults) describeWAL(rep int) string {
	out := ""
	for i, k := range walKinds {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%s %.0f B", k, s.wal[k][rep])
	}
	return out
}
