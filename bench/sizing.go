package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing/fstest"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/bench/internal/mdtable"
	"github.com/idemgen/idemgen/bench/internal/stats"
	"github.com/idemgen/idemgen/bench/ledger"
	"github.com/idemgen/idemgen/generated/outboxdb"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/relay"
	outboxmigrations "github.com/idemgen/idemgen/migrations"
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
//     the relay publishing those outgoing rows (its claim, and the delete
//     once confirmed). Each measurement repeats cfg.walRepeats times,
//     interleaved; the median counts.
//   - the outbox layouts (outboxLayouts): in the same repeats, each layout in
//     a schema of its own writes, publishes and clears away the same
//     outgoing rows, with each phase's WAL counted the same way, so that the
//     layout this release replaced and the alternatives stand beside the
//     runtime's in one run.
//   - bytes per row: the inbox rows those deliveries wrote are copied (new
//     keys of the same shape) until the inbox holds cfg.sizeRows rows, and
//     the outbox is filled with as many rows waiting for the relay (it keeps
//     no published row); after VACUUM ANALYZE, pg_relation_size of the
//     heap, of each index and of the TOAST table, over the rows.
//   - the cost of purging them: the inbox's copies are dated past the
//     retention (31 days old), and one RunOnce of idem.Janitor (30 days, the
//     consumer's retain=) purges them, timed, with its WAL counted the same
//     way. Each inbox layout (inboxSizing) is one row of that table and of
//     the arithmetic.

// walKinds are the WAL measurements, in the order they run.
var walKinds = []string{walBare, walFirst, walClaimFirst, walDuplicate, walPub1, walPub10, walRelay}

const (
	walBare  = "bare UPDATE, no deduplication"
	walFirst = "first delivery (generated wrapper)"
	// The same through the claim-first protocol (WithPessimisticClaim),
	// which writes the inbox row twice.
	walClaimFirst = "first delivery, claim-first (WithPessimisticClaim)"
	walDuplicate  = "duplicate"
	walPub1       = "first delivery publishing 1 message"
	walPub10      = "first delivery publishing 10 messages"
	walRelay      = "relay: claim, publish and delete an outgoing row"
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
	msgs int                  // deliveries per WAL measurement
	wal  map[string][]float64 // bytes per message (per outgoing row for the relay), per repeat
	fpi  map[string][]float64 // of them, full-page images
	// layouts are the outbox layouts' measurements, in the order of
	// outboxLayouts.
	layouts []*layoutResult
	fill    time.Duration
	// inboxes are the inbox layouts, each filled and purged; outbox is the
	// runtime's outbox filled with rows waiting for the relay (it keeps no
	// published row), oldOutbox the outbox of the migration 00001 filled
	// with the published rows it kept.
	inboxes           []inboxSizing
	outbox, oldOutbox tableSize
	// inboxRetain and outboxRetain are the retentions of the arithmetic:
	// the inbox's retain= and, for the layouts that keep published rows,
	// the published rows'.
	inboxRetain, outboxRetain time.Duration
}

// inboxSizing is one inbox layout: its table filled to cfg.sizeRows, and
// the janitor's purge of the copies past the retention.
type inboxSizing struct {
	name     string // as the report shows it
	size     tableSize
	purged   int64
	purge    idem.JanitorReport
	took     time.Duration
	purgeWAL int64
	// dropped: the purge drops partitions instead of deleting rows.
	dropped bool
	// retain is the consumer's retain=; walFirst the WAL of a first
	// delivery through the generated wrapper, walBare of the handler's
	// write alone (no deduplication), bytes per message (medians).
	retain            time.Duration
	walFirst, walBare float64
}

// inboxWAL is the inbox's own share of a first delivery's WAL.
func (i inboxSizing) inboxWAL() float64 { return i.walFirst - i.walBare }

// purgeWALPer is the purge's WAL per purged row.
func (i inboxSizing) purgeWALPer() float64 { return float64(i.purgeWAL) / float64(max(i.purged, 1)) }

// purgeRate is the purge's rows per second.
func (i inboxSizing) purgeRate() float64 { return float64(i.purged) / i.took.Seconds() }

// runtimeLayout returns the measurements of this release's outbox layout,
// and before those of the layout it replaced (the first of outboxLayouts).
func (s *sizingResults) runtimeLayout() (now, before *layoutResult) {
	for i, l := range outboxLayouts {
		if l.runtime {
			now = s.layouts[i]
		}
	}
	return now, s.layouts[0]
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
	// dropped is a regular expression matching the schema's relations in
	// the description of a commit record that removes their files (a
	// dropped partition): the records of such a transaction touch the
	// catalog, not the relations.
	dropped string
	pool    *pgxpool.Pool
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
		SELECT 'rel [0-9]+/[0-9]+/(' || string_agg(pg_relation_filenode(c.oid)::text, '|') || ') ',
		       'rels:.* base/[0-9]+/(' || string_agg(pg_relation_filenode(c.oid)::text, '|') || ')([^0-9]|$)'
		FROM pg_class c
		WHERE pg_relation_filenode(c.oid) IS NOT NULL AND (c.relnamespace = $1::regnamespace
		   OR c.oid IN (SELECT reltoastrelid FROM pg_class WHERE relnamespace = $1::regnamespace)
		   OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid IN (SELECT reltoastrelid FROM pg_class WHERE relnamespace = $1::regnamespace)))`, schema).Scan(&m.rels, &m.dropped); err != nil {
		return nil, err
	}
	return m, nil
}

// position is the server's WAL position, flushed. pg_walinspect reads only
// up to the flushed position, and the relay commits with synchronous_commit
// off: its last records may still wait for the WAL writer, and a position
// read then would leave them to the next measurement. So a transactional
// logical message is written first, in a transaction of its own committed
// synchronously, which flushes everything written before it (its records
// touch no relation of the schema and are of another transaction: not
// counted).
func (m *walMeter) position(ctx context.Context) (string, error) {
	if _, err := m.pool.Exec(ctx, `SELECT pg_logical_emit_message(true, 'idembench', '')`); err != nil {
		return "", fmt.Errorf("flush the WAL: %w", err)
	}
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
		WITH recs AS (SELECT xid, record_length, fpi_length,
		                     block_ref ~ $3 OR (resource_manager = 'Transaction' AND description ~ $4) AS ours
		              FROM `+m.fn+`($1::pg_lsn, $2::pg_lsn)),
		     xids AS (SELECT DISTINCT xid FROM recs WHERE ours AND xid <> '0')
		SELECT COALESCE(sum(record_length), 0)::bigint, COALESCE(sum(fpi_length), 0)::bigint
		FROM recs WHERE ours OR (xid <> '0' AND xid IN (SELECT xid FROM xids))`, from, to, m.rels, m.dropped).Scan(&total, &fpi)
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
	var layouts []*layoutSchema
	defer func() {
		for _, ls := range layouts {
			ls.close()
		}
	}()
	for _, l := range outboxLayouts {
		ls, err := newLayoutSchema(ctx, cfg.db, l)
		if err != nil {
			return nil, err
		}
		layouts = append(layouts, ls)
		res.layouts = append(res.layouts, newLayoutResult())
	}
	layoutSeq := 0

	post := ledger.NewPostIdem(pool)
	claimFirst := ledger.NewPostIdem(pool, idem.WithPessimisticClaim())
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
			case walClaimFirst:
				deliver = func(i int) error { return expect(claimFirst.Handle(ctx, msg(ki, rep, i)))(idem.Processed) }
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
		for i, ls := range layouts {
			if err := ls.measure(ctx, cfg.walMsgs, &layoutSeq, res.layouts[i]); err != nil {
				return nil, err
			}
		}
		logf("sizing: WAL round %d of %d: %s", rep+1, cfg.walRepeats, res.describeWAL(rep))
	}
	for _, ls := range layouts {
		ls.close()
	}
	layouts = nil

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
	// The relay deleted every row it published: the outbox's copies are
	// rows waiting for it (a backlog), of the shape the publishing deposit
	// writes (outgoingRows), ten to a delivery.
	if _, err := pool.Exec(ctx, `INSERT INTO idem_outbox (message_id, consumer, key, destination, payload)
		SELECT gen_random_uuid(), 'bench.ledger', 'MessageID="m-' || (g / 10 % 16) || '-' || (100000 + g / 160) || '"', $2,
		       convert_to(format('{"message_id":"m-%s-%s","seq":%s,"account":%s,"amount":%s}', g / 10 % 16, 100000 + g / 160, g % 10, g % 100 + 1, g % 100 + 1), 'UTF8')
		FROM generate_series(1, $1::int - (SELECT count(*) FROM idem_outbox)::int) g`, cfg.sizeRows, ledger.CreditedDestination); err != nil {
		return nil, fmt.Errorf("fill the outbox: %w", err)
	}
	for _, t := range []string{"idem_bench_ledger", "idem_outbox"} {
		if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+t); err != nil {
			return nil, err
		}
	}
	// The layout this release replaced kept its published rows for the
	// retention: a schema of its own (the migration 00001) filled with as
	// many published rows.
	oldFS, err := outboxLayouts[0].migrations()
	if err != nil {
		return nil, err
	}
	old, oldPool, err := newMigratedSchema(ctx, cfg.db, oldFS)
	if err != nil {
		return nil, err
	}
	defer old.drop()
	defer oldPool.Close()
	if _, err := oldPool.Exec(ctx, `INSERT INTO idem_outbox (message_id, consumer, key, destination, payload, created_at, available_at, published_at, attempts)
		SELECT gen_random_uuid(), 'bench.ledger', 'MessageID="m-' || (g / 10 % 16) || '-' || (100000 + g / 160) || '"', $2,
		       convert_to(format('{"message_id":"m-%s-%s","seq":%s,"account":%s,"amount":%s}', g / 10 % 16, 100000 + g / 160, g % 10, g % 100 + 1, g % 100 + 1), 'UTF8'),
		       now() - interval '8 days', now() - interval '8 days', now() - interval '8 days', 1
		FROM generate_series(1, $1::int) g`, cfg.sizeRows, ledger.CreditedDestination); err != nil {
		return nil, fmt.Errorf("fill the outbox of the migration 00001: %w", err)
	}
	if _, err := oldPool.Exec(ctx, "VACUUM ANALYZE idem_outbox"); err != nil {
		return nil, err
	}
	res.fill = time.Since(started)
	if res.oldOutbox, err = measureTable(ctx, oldPool, "idem_outbox"); err != nil {
		return nil, err
	}
	inbox := inboxSizing{name: "one table; the janitor deletes rows past retain= (the default)", retain: res.inboxRetain,
		walFirst: res.walPer(walFirst), walBare: res.walPer(walBare)}
	if inbox.size, err = measureTable(ctx, pool, "idem_bench_ledger"); err != nil {
		return nil, err
	}
	if res.outbox, err = measureTable(ctx, pool, "idem_outbox"); err != nil {
		return nil, err
	}
	logf("sizing: filled in %s; inbox %d rows, %s; outbox %d rows, %s; the outbox of 00001 %d rows, %s", res.fill.Round(time.Millisecond),
		inbox.size.rows, mdtable.IEC(float64(inbox.size.total)), res.outbox.rows, mdtable.IEC(float64(res.outbox.total)), res.oldOutbox.rows, mdtable.IEC(float64(res.oldOutbox.total)))

	jpool, err := s.namedPool(ctx, 1, "idembench-janitor", nil)
	if err != nil {
		return nil, err
	}
	defer jpool.Close()
	j, err := idem.NewJanitor(jpool, []idem.Maintained{ledger.NewPostIdem(jpool)}, idem.WithJanitorLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, err
	}
	before, err := lsn()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if inbox.purge, err = j.RunOnce(ctx); err != nil {
		return nil, fmt.Errorf("the janitor's purge: %w", err)
	}
	inbox.took = time.Since(t0)
	after, err := lsn()
	if err != nil {
		return nil, err
	}
	if inbox.purgeWAL, _, err = wal.between(ctx, before, after); err != nil {
		return nil, err
	}
	inbox.purged = inbox.purge.Purged["idem_bench_ledger"]
	// The copies; the rows the four kinds of first delivery wrote are kept.
	wantInbox := inbox.size.rows - 4*int64(cfg.walRepeats*cfg.walMsgs)
	logf("sizing: the janitor purged %v in %s (%d statements, the longest %s), %s of WAL", inbox.purge.Purged, inbox.took.Round(time.Millisecond), inbox.purge.Statements, mdtable.Dur(inbox.purge.Longest), mdtable.IEC(float64(inbox.purgeWAL)))
	if inbox.purged != wantInbox || len(inbox.purge.Purged) != 1 {
		return nil, fmt.Errorf("the janitor purged %v, want %d inbox rows (the copies) and nothing else", inbox.purge.Purged, wantInbox)
	}
	res.inboxes = append(res.inboxes, inbox)
	logf("sizing: the partitioned inbox (examples/telemetry), filled to %d rows and its expired day dropped", cfg.sizeRows)
	part, err := sizePartitionedInbox(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("the partitioned inbox: %w", err)
	}
	res.inboxes = append(res.inboxes, part)
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
// rows of the outbox are published (and so deleted).
func relayAll(ctx context.Context, s *schema, n int) error {
	// A relay takes a connection to listen on, one for its statements and
	// one to renew its lease beside a publish.
	pool, _, err := s.pool(ctx, 3)
	if err != nil {
		return err
	}
	defer pool.Close()
	rec := newRecorder()
	relays := startRelays(ctx, pool, rec, 1, relay.WithPollInterval(10*time.Millisecond))
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var pending int64
		if rec.distinct() >= n {
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM idem_outbox`).Scan(&pending); err != nil {
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
	return measureWith(ctx, pool, table, `
		SELECT c.relname, 'heap', pg_relation_size(c.oid), pg_total_relation_size(c.oid) FROM pg_class c WHERE c.oid = $1::regclass
		UNION ALL
		SELECT 'TOAST', 'TOAST', pg_relation_size(c.reltoastrelid) + COALESCE((SELECT sum(pg_relation_size(indexrelid)) FROM pg_index WHERE indrelid = c.reltoastrelid), 0), 0
		FROM pg_class c WHERE c.oid = $1::regclass AND c.reltoastrelid <> 0
		UNION ALL
		(SELECT i.relname, 'index', pg_relation_size(i.oid), 0 FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid WHERE x.indrelid = $1::regclass ORDER BY i.relname)`)
}

// measureWith counts table's rows and reads its sizes with sizes, a query
// of $1 (the table) returning name, kind ("heap", "TOAST", "index"), bytes
// and, for the heap, the table's total size.
func measureWith(ctx context.Context, pool *pgxpool.Pool, table, sizes string) (tableSize, error) {
	t := tableSize{table: table}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&t.rows); err != nil {
		return t, err
	}
	rows, err := pool.Query(ctx, sizes, table)
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

// The outbox layouts, side by side: each in a fresh schema of its own, the
// same outgoing rows (cfg.walMsgs transactions of 10, the rows of a
// delivery that publishes 10 messages) written by the layout's INSERT,
// published by its claim and its record of the broker's confirmation in
// batches of 100 on one connection (as the relay's statements, without a
// broker), then cleared away as the layout does it (the janitor's purge of
// published rows, a dropped partition) with the VACUUM that makes their
// space reusable. Each phase's WAL is counted as above, per outgoing row;
// every repeat measures every layout, interleaved with the kinds above.
// Autovacuum is off on the layouts' tables so that it writes into no
// phase; the cleanup's VACUUM stands for it.

// outboxLayout is one way to keep the outbox.
type outboxLayout struct {
	name string // as the report shows it
	what string // what it does, for the report
	// migrations returns the goose migrations that create idem_outbox (and
	// what else the layout keeps) in a fresh schema.
	migrations func() (fs.FS, error)
	// write inserts one transaction's outgoing rows.
	write func(ctx context.Context, db outboxdb.DBTX, p outboxdb.InsertOutboxParams) error
	// claim claims up to batch due rows for token and returns their
	// message ids, in text form.
	claim func(ctx context.Context, db outboxdb.DBTX, token any, batch int) ([]string, error)
	// mark records that the broker confirmed the rows ids claimed by token.
	mark func(ctx context.Context, db outboxdb.DBTX, token any, ids []string) error
	// uuidToken: the layout's claim_token is a uuid (before the migration
	// 00003), not a bigint.
	uuidToken bool
	// cleanup statements run once the rows are published, each until it
	// affects fewer rows than a janitor's batch, before the VACUUM.
	cleanup []string
	// runtime marks the layout of this release's migrations and statements.
	runtime bool
}

// The statements of sql/outbox.sql before the migration 00002 (published
// rows kept, with published_at, until the janitor purged them), as sqlc
// compiled them, but naming the rows after the claim by their message id
// (unique, indexed) rather than by id, as this release's relay does (the
// WAL they write is the same); the layouts that keep published rows use
// them.
const (
	oldInsertOutbox = `INSERT INTO idem_outbox (message_id, consumer, key, destination, ordering_key, headers, payload)
SELECT m.message_id, $1::text, m.key, m.destination, m.ordering_key, m.headers, m.payload
FROM (
    SELECT unnest($2::text[]) AS key,
           unnest($3::text[])::uuid AS message_id,
           unnest($4::text[]) AS destination,
           unnest($5::text[]) AS ordering_key,
           unnest($6::text[])::jsonb AS headers,
           unnest($7::bytea[]) AS payload,
           generate_series(1, cardinality($2::text[])) AS n
) AS m
ORDER BY m.n
ON CONFLICT (%s) DO NOTHING`
	oldClaim = `UPDATE idem_outbox AS o
SET claim_token = $1,
    lease_until = now() + make_interval(secs => 30),
    attempts    = o.attempts + 1
WHERE o.id IN (
    SELECT c.id
    FROM idem_outbox AS c
    WHERE c.published_at IS NULL
      AND c.dead_at IS NULL
      AND c.available_at <= now()
      AND (c.lease_until IS NULL OR c.lease_until <= now())
    ORDER BY c.available_at, c.id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
RETURNING o.message_id::text`
	oldMarkPublished = `UPDATE idem_outbox
SET published_at = now(),
    claim_token  = NULL,
    lease_until  = NULL
WHERE message_id = ANY ($1::text[]::uuid[])
  AND claim_token = $2
  AND published_at IS NULL`
	// The janitor's purge, with a retention of 0 and its default batch.
	oldPurgePublished = `DELETE FROM idem_outbox
WHERE id IN (
    SELECT p.id
    FROM idem_outbox AS p
    WHERE p.published_at < now()
    ORDER BY p.published_at
    LIMIT 500
    FOR UPDATE SKIP LOCKED
)`
)

// The statements of sql/outbox.sql under the migration 00002 (before
// 00003): a uuid claim token, ” and '{}' written for no ordering key and no
// headers, as sqlc compiled them.
const (
	v2InsertOutbox = `INSERT INTO idem_outbox (message_id, consumer, key, destination, ordering_key, headers, payload)
SELECT m.message_id, $1::text, m.key, m.destination, m.ordering_key, m.headers, m.payload
FROM (
    SELECT unnest($2::text[]) AS key,
           unnest($3::text[])::uuid AS message_id,
           unnest($4::text[]) AS destination,
           unnest($5::text[]) AS ordering_key,
           unnest($6::text[])::jsonb AS headers,
           unnest($7::bytea[]) AS payload,
           generate_series(1, cardinality($2::text[])) AS n
) AS m
WHERE NOT EXISTS (SELECT 1 FROM idem_outbox AS o WHERE o.message_id = m.message_id)
ORDER BY m.n`
	v2Claim = `UPDATE idem_outbox AS o
SET claim_token = $1,
    lease_until = now() + make_interval(secs => 30),
    attempts    = o.attempts + 1
WHERE o.message_id IN (
    SELECT c.message_id
    FROM idem_outbox AS c
    WHERE c.dead_at IS NULL
      AND c.available_at <= now()
      AND (c.lease_until IS NULL OR c.lease_until <= now())
    ORDER BY c.available_at, c.id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
RETURNING o.message_id::text`
	v2MarkPublished = `DELETE FROM idem_outbox
WHERE message_id = ANY ($1::text[]::uuid[])
  AND claim_token = $2`
)

// on00001 returns the migration 00001 followed by the statements of a
// layout built from its table.
func on00001(ddl string) (fs.FS, error) {
	first, err := subFS(outboxmigrations.FS, "00001_idem_outbox.sql")
	if err != nil {
		return nil, err
	}
	return withMigration(first, "00002_layout.sql", ddl)
}

// outboxLayouts are the layouts measured: the one of 00001 first (the
// "before" of the report), then 00002's, then the runtime's.
var outboxLayouts = []outboxLayout{
	{
		name: "before: published_at set on publish (00001)",
		what: "the relay's mark sets published_at (an update that rewrites the row and adds an entry to the primary key, the message id's index and the published index); the janitor deletes published rows after the retention",
		migrations: func() (fs.FS, error) {
			return subFS(outboxmigrations.FS, "00001_idem_outbox.sql")
		},
		write:     execInsert(fmt.Sprintf(oldInsertOutbox, "message_id")),
		claim:     queryIDs(oldClaim),
		mark:      execIDs(oldMarkPublished),
		cleanup:   []string{oldPurgePublished},
		uuidToken: true,
	},
	{
		name: "delete on publish, fillfactor 40, message id the primary key (00002)",
		what: "the relay deletes a row once confirmed; most of each page is left free, so that the claim's update (of columns no index covers) stays in the row's page, a HOT update; the message id is the primary key and id has no index of its own; the INSERT skips a message id already there with NOT EXISTS instead of ON CONFLICT (whose speculative insertion writes a confirmation record a row); a uuid claim token, and '' and '{}' for no ordering key and no headers",
		migrations: func() (fs.FS, error) {
			return subFS(outboxmigrations.FS, "00001_idem_outbox.sql", "00002_idem_outbox_delete_on_publish.sql")
		},
		write:     execInsert(v2InsertOutbox),
		claim:     queryIDs(v2Claim),
		mark:      execIDs(v2MarkPublished),
		uuidToken: true,
	},
	{
		name:       "now: 00002 with a bigint claim token last beside lease_until and attempts, NULL for no ordering key and no headers (00003)",
		what:       "as 00002, but the claim's HOT update logs 20 bytes of the row instead of 32 (the bytes between the first and the last it changes: a bigint token instead of a uuid, and claim_token, lease_until, attempts the last columns, adjacent), and a row without an ordering key or headers stores NULL instead of '' and '{}' (8 bytes less with the alignment)",
		migrations: func() (fs.FS, error) { return outboxmigrations.FS, nil },
		write:      runtimeInsert,
		claim:      runtimeClaim,
		mark:       runtimeMark,
		runtime:    true,
	},
	{
		name:       "now, with the claim's FOR UPDATE SKIP LOCKED replaced by advisory locks",
		what:       "as now, but the claim skips rows another claim holds with pg_try_advisory_xact_lock on up to twice a batch of candidates instead of locking them with FOR UPDATE SKIP LOCKED, whose lock writes a record a row; not taken: each claimed row then takes an entry of the server's lock table (max_locks_per_transaction × connections), which bounds the batch size, and the relays' claims are FOR UPDATE SKIP LOCKED by contract",
		migrations: func() (fs.FS, error) { return outboxmigrations.FS, nil },
		write:      runtimeInsert,
		claim: queryIDs(`UPDATE idem_outbox AS o
SET claim_token = $1, lease_until = now() + make_interval(secs => 30), attempts = o.attempts + 1
WHERE o.message_id IN (
    SELECT k.message_id
    FROM (SELECT c.message_id, c.id
          FROM idem_outbox AS c
          WHERE c.dead_at IS NULL AND coalesce(c.available_at, c.created_at) <= now() AND (c.lease_until IS NULL OR c.lease_until <= now())
          ORDER BY coalesce(c.available_at, c.created_at), c.id
          LIMIT 2 * $2) AS k
    WHERE pg_try_advisory_xact_lock(1768843630, hashtext(k.message_id::text))
    LIMIT $2)
  AND o.dead_at IS NULL AND (o.lease_until IS NULL OR o.lease_until <= now())
RETURNING o.message_id::text`),
		mark: runtimeMark,
	},
	{
		name: "delete on publish only: id the primary key, ON CONFLICT, fillfactor 40",
		what: "as now, with the indexes and the INSERT of 00001 (which writes '' and '{}'): id the primary key and the message id unique beside it, ON CONFLICT (message_id) DO NOTHING",
		migrations: func() (fs.FS, error) {
			return withMigration(outboxmigrations.FS, "00004_id_primary_key.sql", `ALTER TABLE idem_outbox DROP CONSTRAINT idem_outbox_pkey;
ALTER TABLE idem_outbox ADD PRIMARY KEY (id);
ALTER TABLE idem_outbox ADD UNIQUE (message_id);`)
		},
		write: execInsert(fmt.Sprintf(oldInsertOutbox, "message_id")),
		claim: runtimeClaim,
		mark:  runtimeMark,
	},
	{
		name: "now, fillfactor 100",
		what: "as now, with pages filled full: the claim's update has no room in the row's page and goes to another, with an entry in every index",
		migrations: func() (fs.FS, error) {
			return withMigration(outboxmigrations.FS, "00004_fillfactor_100.sql", `ALTER TABLE idem_outbox RESET (fillfactor);`)
		},
		write: runtimeInsert,
		claim: runtimeClaim,
		mark:  runtimeMark,
	},
	{
		name: "partitioned by day, dropped",
		what: "the 00001 table and statements, range-partitioned on created_at (the primary key and the message id's unique index must then hold created_at, so the message id is unique only within a day); the purge drops a partition instead of deleting rows",
		migrations: func() (fs.FS, error) {
			return on00001(`ALTER TABLE idem_outbox RENAME TO idem_outbox_00001;
CREATE TABLE idem_outbox (LIKE idem_outbox_00001 INCLUDING DEFAULTS INCLUDING IDENTITY) PARTITION BY RANGE (created_at);
DROP TABLE idem_outbox_00001;
ALTER TABLE idem_outbox ADD PRIMARY KEY (id, created_at), ADD UNIQUE (message_id, created_at);
CREATE TABLE idem_outbox_today PARTITION OF idem_outbox DEFAULT WITH (autovacuum_enabled = false);
CREATE INDEX idem_outbox_due ON idem_outbox (available_at, id) WHERE published_at IS NULL AND dead_at IS NULL;
CREATE INDEX idem_outbox_ordered ON idem_outbox (ordering_key, id) WHERE published_at IS NULL AND dead_at IS NULL AND ordering_key <> '';
CREATE INDEX idem_outbox_published ON idem_outbox (published_at) WHERE published_at IS NOT NULL;
CREATE INDEX idem_outbox_dead ON idem_outbox (dead_at) WHERE dead_at IS NOT NULL;`)
		},
		write: execInsert(fmt.Sprintf(oldInsertOutbox, "message_id, created_at")),
		claim: queryIDs(oldClaim),
		mark:  execIDs(oldMarkPublished),
		// The day's partition goes; the next day's is there already (here:
		// made again for the next repeat).
		cleanup: []string{`DROP TABLE idem_outbox_today`,
			`CREATE TABLE idem_outbox_today PARTITION OF idem_outbox DEFAULT WITH (autovacuum_enabled = false)`},
		uuidToken: true,
	},
	{
		name: "published ids in a narrow side table",
		what: "the 00001 table without published_at; the mark inserts the ids into idem_outbox_published (id primary key), and the claim skips the ids found there; the purge deletes both",
		migrations: func() (fs.FS, error) {
			// Dropping published_at drops the indexes that name it.
			return on00001(`ALTER TABLE idem_outbox DROP COLUMN published_at;
CREATE TABLE idem_outbox_published (id bigint PRIMARY KEY);
CREATE INDEX idem_outbox_due ON idem_outbox (available_at, id) WHERE dead_at IS NULL;
CREATE INDEX idem_outbox_ordered ON idem_outbox (ordering_key, id) WHERE dead_at IS NULL AND ordering_key <> '';`)
		},
		write: execInsert(fmt.Sprintf(oldInsertOutbox, "message_id")),
		claim: queryIDs(`UPDATE idem_outbox AS o
SET claim_token = $1, lease_until = now() + make_interval(secs => 30), attempts = o.attempts + 1
WHERE o.id IN (
    SELECT c.id FROM idem_outbox AS c
    WHERE c.dead_at IS NULL AND c.available_at <= now() AND (c.lease_until IS NULL OR c.lease_until <= now())
      AND NOT EXISTS (SELECT 1 FROM idem_outbox_published AS p WHERE p.id = c.id)
    ORDER BY c.available_at, c.id LIMIT $2 FOR UPDATE SKIP LOCKED)
RETURNING o.message_id::text`),
		mark: execIDs(`INSERT INTO idem_outbox_published (id)
SELECT o.id FROM idem_outbox AS o WHERE o.message_id = ANY ($1::text[]::uuid[]) AND o.claim_token = $2`),
		cleanup: []string{`WITH p AS (
    DELETE FROM idem_outbox_published WHERE id IN (SELECT id FROM idem_outbox_published ORDER BY id LIMIT 500)
    RETURNING id
)
DELETE FROM idem_outbox WHERE id IN (SELECT id FROM p)`},
		uuidToken: true,
	},
	{
		name: "published_at in no index, fillfactor 50 (HOT mark)",
		what: "the 00001 table and statements with half of each page free and no index on or about published_at (the claim's index is on rows not dead, and filters published rows in the heap), so that the mark is a HOT update too; the purge finds published rows without an index",
		migrations: func() (fs.FS, error) {
			return on00001(`ALTER TABLE idem_outbox SET (fillfactor = 50);
DROP INDEX idem_outbox_due;
DROP INDEX idem_outbox_ordered;
DROP INDEX idem_outbox_published;
CREATE INDEX idem_outbox_due ON idem_outbox (available_at, id) WHERE dead_at IS NULL;
CREATE INDEX idem_outbox_ordered ON idem_outbox (ordering_key, id) WHERE dead_at IS NULL AND ordering_key <> '';`)
		},
		write: execInsert(fmt.Sprintf(oldInsertOutbox, "message_id")),
		claim: queryIDs(oldClaim),
		mark:  execIDs(oldMarkPublished),
		cleanup: []string{`DELETE FROM idem_outbox
WHERE id IN (SELECT p.id FROM idem_outbox AS p WHERE p.published_at < now() LIMIT 500 FOR UPDATE SKIP LOCKED)`},
		uuidToken: true,
	},
}

// subFS returns the files names of fsys, at their names.
func subFS(fsys fs.FS, names ...string) (fs.FS, error) {
	out := fstest.MapFS{}
	for _, name := range names {
		data, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		out[name] = &fstest.MapFile{Data: data}
	}
	return out, nil
}

// withMigration returns fsys's migrations and one more, up only.
func withMigration(fsys fs.FS, name, up string) (fs.FS, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, err
	}
	out, err := subFS(fsys, names...)
	if err != nil {
		return nil, err
	}
	out.(fstest.MapFS)[name] = &fstest.MapFile{Data: []byte("-- +goose Up\n" + up + "\n")}
	return out, nil
}

func execInsert(sql string) func(context.Context, outboxdb.DBTX, outboxdb.InsertOutboxParams) error {
	return func(ctx context.Context, db outboxdb.DBTX, p outboxdb.InsertOutboxParams) error {
		_, err := db.Exec(ctx, sql, p.Consumer, p.Keys, p.MessageIds, p.Destinations, p.OrderingKeys, p.Headers, p.Payloads)
		return err
	}
}

func queryIDs(sql string) func(context.Context, outboxdb.DBTX, any, int) ([]string, error) {
	return func(ctx context.Context, db outboxdb.DBTX, token any, batch int) ([]string, error) {
		rows, err := db.Query(ctx, sql, token, batch)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, pgx.RowTo[string])
	}
}

func execIDs(sql string) func(context.Context, outboxdb.DBTX, any, []string) error {
	return func(ctx context.Context, db outboxdb.DBTX, token any, ids []string) error {
		_, err := db.Exec(ctx, sql, ids, token)
		return err
	}
}

// runtimeInsert, runtimeClaim and runtimeMark are this release's statements
// (sql/outbox.sql, compiled by sqlc), as the wrapper and the relay run them.
func runtimeInsert(ctx context.Context, db outboxdb.DBTX, p outboxdb.InsertOutboxParams) error {
	_, err := outboxdb.New(db).InsertOutbox(ctx, p)
	return err
}

func runtimeClaim(ctx context.Context, db outboxdb.DBTX, token any, batch int) ([]string, error) {
	rows, err := outboxdb.New(db).Claim(ctx, outboxdb.ClaimParams{ClaimToken: token.(int64), LeaseSeconds: 30, BatchSize: int32(batch)})
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.MessageID.String()
	}
	return ids, err
}

func runtimeMark(ctx context.Context, db outboxdb.DBTX, token any, ids []string) error {
	_, err := outboxdb.New(db).MarkPublished(ctx, outboxdb.MarkPublishedParams{MessageIds: ids, ClaimToken: token.(int64)})
	return err
}

// layoutResult is what one layout measured, per repeat: WAL bytes per
// outgoing row, per phase, of which full-page images. (Bytes per row are
// measured on the filled tables below: a layout's small table here also
// holds what its VACUUM could not yet remove.)
type layoutResult struct {
	wal, fpi map[string][]float64
}

func newLayoutResult() *layoutResult {
	return &layoutResult{wal: map[string][]float64{}, fpi: map[string][]float64{}}
}

// writePublish is the WAL of an outgoing row from its write to its
// publish: the target's measure.
func (l *layoutResult) writePublish() float64 { return l.walPer("write") + l.walPer("publish") }

func (l *layoutResult) walPer(phase string) float64 { return stats.Median(l.wal[phase]) }
func (l *layoutResult) fpiPer(phase string) float64 { return stats.Median(l.fpi[phase]) }

// layoutSchema is a layout's schema, ready for a repeat.
type layoutSchema struct {
	layout outboxLayout
	s      *schema
	pool   *pgxpool.Pool
}

// newLayoutSchema creates the layout's schema with autovacuum off on every
// table it has.
func newLayoutSchema(ctx context.Context, base string, l outboxLayout) (*layoutSchema, error) {
	migrations, err := l.migrations()
	if err != nil {
		return nil, err
	}
	s, pool, err := newMigratedSchema(ctx, base, migrations)
	if err != nil {
		return nil, fmt.Errorf("layout %q: %w", l.name, err)
	}
	ls := &layoutSchema{layout: l, s: s, pool: pool}
	if _, err := pool.Exec(ctx, `DO $$
DECLARE t regclass;
BEGIN
    FOR t IN SELECT oid FROM pg_class WHERE relnamespace = current_schema()::regnamespace AND relkind = 'r' LOOP
        EXECUTE format('ALTER TABLE %s SET (autovacuum_enabled = false)', t);
    END LOOP;
END $$`); err != nil {
		ls.close()
		return nil, fmt.Errorf("layout %q: autovacuum off: %w", l.name, err)
	}
	return ls, nil
}

func (ls *layoutSchema) close() {
	ls.pool.Close()
	ls.s.drop()
}

// measure writes msgs transactions of 10 outgoing rows, publishes them and
// clears them away, and adds each phase's WAL per row to res.
func (ls *layoutSchema) measure(ctx context.Context, msgs int, seq *int, res *layoutResult) error {
	l := ls.layout
	// The relations as they are now: a layout's cleanup may have made new
	// ones (a partition).
	wal, err := newWALMeter(ctx, ls.pool, ls.s.name)
	if err != nil {
		return err
	}
	rows := 10 * msgs
	phase := func(name string, run func() error) error {
		before, err := wal.position(ctx)
		if err != nil {
			return err
		}
		if err := run(); err != nil {
			return fmt.Errorf("layout %q, %s: %w", l.name, name, err)
		}
		after, err := wal.position(ctx)
		if err != nil {
			return err
		}
		total, fpi, err := wal.between(ctx, before, after)
		if err != nil {
			return err
		}
		res.wal[name] = append(res.wal[name], float64(total)/float64(rows))
		res.fpi[name] = append(res.fpi[name], float64(fpi)/float64(rows))
		return nil
	}
	if err := phase("write", func() error {
		for range msgs {
			*seq++
			if err := l.write(ctx, ls.pool, outgoingRows(*seq)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	// Statistics, as autovacuum would have them (it is off on these
	// tables): a claim planned for an empty table can take minutes. ANALYZE
	// writes to the catalog, not to the layout's relations.
	if err := maintainSchema(ctx, ls.pool, "ANALYZE"); err != nil {
		return err
	}
	published := 0
	if err := phase("publish", func() error {
		for {
			var token any = rand.Int64N(math.MaxInt64) + 1
			if l.uuidToken {
				token = pgtype.UUID{Bytes: uuid.New(), Valid: true}
			}
			ids, err := l.claim(ctx, ls.pool, token, relay.DefaultBatchSize)
			if err != nil || len(ids) == 0 {
				return err
			}
			if err := l.mark(ctx, ls.pool, token, ids); err != nil {
				return err
			}
			published += len(ids)
		}
	}); err != nil {
		return err
	}
	if published != rows {
		return fmt.Errorf("layout %q: published %d of %d rows", l.name, published, rows)
	}
	return phase("cleanup", func() error {
		for _, sql := range l.cleanup {
			for {
				tag, err := ls.pool.Exec(ctx, sql)
				if err != nil {
					return err
				}
				if tag.RowsAffected() < int64(idem.DefaultJanitorBatchSize) {
					break
				}
			}
		}
		return maintainSchema(ctx, ls.pool, "VACUUM")
	})
}

// maintainSchema runs command (VACUUM, ANALYZE) on the tables of the
// connection's schema (without a table it would take every table of the
// database).
func maintainSchema(ctx context.Context, pool *pgxpool.Pool, command string) error {
	var tables string
	if err := pool.QueryRow(ctx, `SELECT string_agg(format('%I', relname), ', ') FROM pg_class
		WHERE relnamespace = current_schema()::regnamespace AND relkind = 'r'`).Scan(&tables); err != nil {
		return err
	}
	_, err := pool.Exec(ctx, command+" "+tables)
	return err
}

// outgoingRows are the 10 outgoing rows of the seq-th delivery, as the
// publishing deposit of bench/ledger writes them: its consumer, key,
// destination and payload, stable ids of its key.
func outgoingRows(seq int) outboxdb.InsertOutboxParams {
	msg := ledger.Deposit{MessageID: "m-l-" + strconv.Itoa(seq), Account: int64(seq%100) + 1, Amount: int64(seq%100) + 1}
	p := outboxdb.InsertOutboxParams{Consumer: "bench.ledger"}
	for i := range 10 {
		payload, _ := json.Marshal(ledger.Credited{MessageID: msg.MessageID, Seq: i, Account: msg.Account, Amount: msg.Amount})
		id, _ := ledger.OutgoingID(msg, i)
		p.Keys = append(p.Keys, `MessageID="`+msg.MessageID+`"`)
		p.MessageIds = append(p.MessageIds, id)
		p.Destinations = append(p.Destinations, ledger.CreditedDestination)
		p.OrderingKeys = append(p.OrderingKeys, "")
		p.Headers = append(p.Headers, "{}")
		p.Payloads = append(p.Payloads, payload)
	}
	return p
}
