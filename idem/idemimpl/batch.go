package idemimpl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/pgutil"
)

// DeliverBatch is HandleBatch with the results dropped: it makes an Inbox a
// [idem.BatchHandler] of M.
func (in *Inbox[M, R]) DeliverBatch(ctx context.Context, msgs []M) []idem.Result[idem.None] {
	results, _ := in.HandleBatch(ctx, msgs)
	out := make([]idem.Result[idem.None], len(results))
	for i, r := range results {
		out[i] = idem.Result[idem.None]{Outcome: r.Outcome, Err: r.Err}
	}
	return out
}

// HandleBatch delivers msgs, each with the outcome Handle would give it, in
// as few transactions as it can: one per WithBatchCap messages (100 by
// default). In that transaction the keys are claimed in one statement, the
// keys processed before are answered from one lookup, the handler runs on
// the same transaction (a set-based one once, with the messages whose keys
// the claim won, in input order; a handler of one message once for each, in
// that order), and the results and outbox rows are stored in the round trip
// of the COMMIT.
//
// A key twice in msgs is processed once: the later message is a Duplicate of
// the first (with its result, or its error if the first failed), or
// ErrKeyReused if its payload differs. A message whose key is invalid gets
// ErrInvalidKey and takes no part in the transaction. When a handler fails
// (or the claim cannot wait for a concurrent delivery of a key, or the
// transaction hits a serialization failure or deadlock), the transaction is
// rolled back and its messages are delivered again one transaction each,
// through Handle, so each gets its own outcome and the others commit once.
// A handler's panic rolls the transaction back and goes on up the stack.
//
// With a stale-message guard, a message older than its entity's last
// applied version gets ErrStale and leaves no row, as in Handle; a batch
// takes one message of an entity, and the later messages of that entity are
// delivered after it, one transaction each, in input order, so that each is
// judged against the versions before it as one by one.
//
// The results are in input order, one per message; ack each message
// exactly when its Err is nil. The error is non-nil only when no message
// could be tried at all (no connection could be acquired, the context was
// done): every Result then holds it too. Each message is counted and logged
// as a delivery of its own.
func (in *Inbox[M, R]) HandleBatch(ctx context.Context, msgs []M) ([]idem.Result[R], error) {
	results := make([]idem.Result[R], len(msgs))
	var first error
	failed := 0
	for start := 0; start < len(msgs); start += in.batchCap {
		end := min(start+in.batchCap, len(msgs))
		if err := in.handleBatch(ctx, msgs[start:end], results[start:end]); err != nil {
			if first == nil {
				first = err
			}
			failed += end - start
		}
	}
	if failed > 0 && failed == len(msgs) {
		return results, first
	}
	return results, nil
}

// batch is one transaction of HandleBatch.
type batch[M, R any] struct {
	in      *Inbox[M, R]
	msgs    []M
	results []idem.Result[R]
	start   time.Time

	keys    [][]any
	fps     [][]byte
	order   [][2]any // the entity and version of each message, with a guard
	dupOf   []int    // the index of the first message with the same key, or -1
	primary []int    // the messages to claim: valid, first of their key
	done    []bool
	// running are the messages whose keys' committed rows were found
	// running: each is delivered alone after the batch, taking its key over.
	running []int
	// later are the messages of an entity that an earlier message of the
	// batch has (with a guard): each is delivered alone after the batch.
	later []int
}

// handleBatch fills results for msgs, at most batchCap of them. It returns
// an error only when no message could be tried (every result holds it).
func (in *Inbox[M, R]) handleBatch(ctx context.Context, msgs []M, results []idem.Result[R]) error {
	b := &batch[M, R]{in: in, msgs: msgs, results: results, start: time.Now(),
		keys: make([][]any, len(msgs)), fps: make([][]byte, len(msgs)), dupOf: make([]int, len(msgs)), done: make([]bool, len(msgs))}
	b.prepare()
	defer b.copyDuplicates(ctx)
	if len(b.primary) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return b.failAll(ctx, err)
	}
	pooled, err := in.db.Acquire(ctx)
	if err != nil {
		return b.failAll(ctx, fmt.Errorf("idem: acquire a connection: %w", err))
	}
	conn := pooled.Conn()
	var retry []int
	if in.claimFirst {
		retry = b.run(ctx, conn)
	} else {
		retry = b.runOptimistic(ctx, conn)
	}
	pooled.Release()
	b.oneByOne(ctx, append(append(retry, b.running...), b.later...))
	return nil
}

// prepare validates the keys, computes the fingerprints and deduplicates the
// batch in memory.
func (b *batch[M, R]) prepare() {
	in := b.in
	seen := make(map[string]int, len(b.msgs))
	entities := map[string]bool{}
	if in.table.Order != nil {
		b.order = make([][2]any, len(b.msgs))
	}
	for i, msg := range b.msgs {
		b.dupOf[i] = -1
		key, err := validKey(msg, in.table.Key, in.fields)
		if err != nil {
			b.decide(context.Background(), i, idem.Result[R]{Err: in.fail(nil, err)})
			continue
		}
		b.keys[i] = key
		fp, err := fingerprint(msg)
		if err != nil {
			b.decide(context.Background(), i, idem.Result[R]{Err: in.fail(key, err)})
			continue
		}
		b.fps[i] = fp
		id := keyID(key)
		if first, ok := seen[id]; ok {
			if !bytes.Equal(b.fps[first], fp) {
				b.decide(context.Background(), i, idem.Result[R]{Err: in.fail(key, idem.ErrKeyReused)})
				continue
			}
			b.dupOf[i] = first
			continue
		}
		seen[id] = i
		if b.order != nil {
			entity, version, err := in.table.Order(msg)
			if err != nil {
				b.decide(context.Background(), i, idem.Result[R]{Err: in.fail(key, err)})
				continue
			}
			b.order[i] = [2]any{entity, version}
			e := keyText(entity)
			if entities[e] {
				b.later = append(b.later, i)
				continue
			}
			entities[e] = true
		}
		b.primary = append(b.primary, i)
	}
}

// decide records message i's outcome and observes it as a delivery.
func (b *batch[M, R]) decide(ctx context.Context, i int, r idem.Result[R]) {
	b.results[i] = r
	b.done[i] = true
	in, msg := b.in, b.msgs[i]
	observeDelivery(ctx, &in.ob, msg, r.Outcome, r.Err, time.Since(b.start), 0, func() (string, string) { return in.keyText(msg, r.Err) })
}

// copyDuplicates gives each in-batch duplicate its first message's outcome:
// Duplicate with its result, or its error.
func (b *batch[M, R]) copyDuplicates(ctx context.Context) {
	for i, first := range b.dupOf {
		if first < 0 {
			continue
		}
		r := b.results[first]
		if r.Err == nil {
			r.Outcome = idem.Duplicate
		}
		b.decide(ctx, i, r)
	}
}

// failAll gives every undecided message err; it is what the batch returns.
func (b *batch[M, R]) failAll(ctx context.Context, err error) error {
	for _, i := range append(append([]int(nil), b.primary...), b.later...) {
		if !b.done[i] {
			b.decide(ctx, i, idem.Result[R]{Err: b.in.fail(b.keys[i], err)})
		}
	}
	return err
}

// oneByOne delivers the messages at the given indexes that are not decided
// yet through Handle, one transaction each, in order; Handle observes them.
func (b *batch[M, R]) oneByOne(ctx context.Context, indexes []int) {
	for _, i := range indexes {
		if b.done[i] {
			continue
		}
		v, o, err := b.in.Handle(ctx, b.msgs[i])
		b.results[i] = idem.Result[R]{Value: v, Outcome: o, Err: err}
		b.done[i] = true
	}
}

// run is the claim-first batch's transaction on conn (WithPessimisticClaim,
// or a stale-message guard). It decides what it can and
// returns the messages to deliver one by one (after a rollback).
func (b *batch[M, R]) run(ctx context.Context, conn *pgx.Conn) (retry []int) {
	in := b.in
	keys, fps := make([][]any, len(b.primary)), make([][]byte, len(b.primary))
	var order [][2]any
	if b.order != nil {
		order = make([][2]any, len(b.primary))
	}
	for j, i := range b.primary {
		keys[j], fps[j] = b.keys[i], b.fps[i]
		if order != nil {
			order[j] = b.order[i]
		}
	}

	// BEGIN and the claim, in one round trip.
	pb := pgutil.NewBatch(2)
	pb.BeginTx(in.txOptions)
	q := in.sql.batchClaimKeys(keys, fps, in.lockWait, order)
	pb.Queue(q.sql, q.args...)
	br := conn.SendBatch(ctx, pb)
	claimed, fresh, err := readBatchClaim(br, len(b.primary))
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	tx := br.Tx()
	switch {
	case err == nil:
	case pgutil.HasSQLState(err, pgerrcode.LockNotAvailable, pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected),
		in.table.Partition != "" && isNoPartition(err):
		// A key is held by a concurrent delivery, or the isolation level
		// refused a row committed after the snapshot, or (a partitioned
		// inbox) a message's bucket has no partition: each message on its
		// own resolves it (ErrInProgress, Duplicate, processed, or
		// ErrOutsideWindow for that message only).
		pgutil.Rollback(ctx, conn)
		return b.primary
	default:
		pgutil.Rollback(ctx, conn)
		b.failAll(ctx, fmt.Errorf("idem: batch claim: %w", err))
		return nil
	}

	var won, stale, lost []int // indexes into b.primary
	for j := range b.primary {
		switch {
		case claimed[j] && fresh[j]:
			won = append(won, j)
		case claimed[j]:
			stale = append(stale, j)
		default:
			lost = append(lost, j)
		}
	}

	if len(lost) > 0 {
		// The keys this batch did not insert were committed by other
		// deliveries (the claim waited for them): under READ COMMITTED the
		// lookup's snapshot sees them; under REPEATABLE READ or SERIALIZABLE
		// a row committed after the snapshot failed the claim above. With
		// nothing claimed the transaction is rolled back first, in the same
		// round trip, and the lookup runs in a fresh snapshot.
		lostKeys := make([][]any, len(lost))
		for k, j := range lost {
			lostKeys[k] = keys[j]
		}
		if err := b.lookup(ctx, conn, lost, lostKeys, len(won) == 0); err != nil {
			// Nothing decided: each message on its own.
			pgutil.Rollback(ctx, conn)
			return b.primary
		}
	}
	// A stale message's verdict holds whatever the batch does: its entity
	// has no other message in the batch, so the version it lost to was
	// committed before. Its row goes: with the rollback when nothing is
	// won, or by the commit's round trip.
	var staleKeys [][]any
	for _, j := range stale {
		i := b.primary[j]
		staleKeys = append(staleKeys, b.keys[i])
		b.decide(ctx, i, idem.Result[R]{Err: in.fail(b.keys[i], idem.ErrStale)})
	}
	if len(won) == 0 {
		if len(lost) == 0 {
			pgutil.Rollback(ctx, conn) // the lookup did not roll back
		}
		return nil
	}

	// The handler, on the one transaction: a set-based one once with the
	// won messages, in input order; a handler of one message once for each,
	// in that order.
	fallback := func() []int {
		pgutil.Rollback(ctx, conn)
		retry = retry[:0]
		for _, j := range won {
			retry = append(retry, b.primary[j])
		}
		return retry
	}
	wonMsgs := make([]M, len(won))
	for k, j := range won {
		wonMsgs[k] = b.msgs[b.primary[j]]
	}
	values, outs, err := in.runHandler(ctx, conn, tx, wonMsgs)
	if err != nil {
		return fallback()
	}
	encoded := make([]string, len(won))
	for k, v := range values {
		enc, err := encodeResult(in.noResult, v)
		if err != nil {
			return fallback()
		}
		encoded[k] = string(enc)
	}
	if in.beforeCommit != nil {
		if err := runBeforeCommit(ctx, conn, tx, in.beforeCommit); err != nil {
			return fallback()
		}
	}
	if err := stillInTransaction(conn); err != nil {
		return fallback()
	}

	wonKeys := make([][]any, len(won))
	for k, j := range won {
		wonKeys[k] = keys[j]
	}
	switch err := b.complete(ctx, conn, wonKeys, encoded, outs, staleKeys); {
	case err == nil:
	case errors.Is(err, errBatchRolledBack):
		return fallback()
	default:
		// The COMMIT failed: its outcome is unknown, and the redeliveries
		// resolve it (Duplicate, or processed).
		for _, j := range won {
			i := b.primary[j]
			b.decide(ctx, i, idem.Result[R]{Err: in.fail(b.keys[i], err)})
		}
		return nil
	}
	for k, j := range won {
		b.decide(ctx, b.primary[j], idem.Result[R]{Value: values[k], Outcome: idem.Processed})
	}
	return nil
}

// readBatchClaim reads BEGIN and the claim: which of the n keys it
// inserted, and whether each of those is fresh.
func readBatchClaim(br pgx.BatchResults, n int) (claimed, fresh []bool, err error) {
	if _, err := br.Exec(); err != nil { // BEGIN
		return nil, nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	claimed, fresh = make([]bool, n), make([]bool, n)
	for rows.Next() {
		var pos int64
		var isFresh bool
		if err := rows.Scan(&pos, &isFresh); err != nil {
			return nil, nil, err
		}
		if pos < 1 || pos > int64(n) {
			return nil, nil, fmt.Errorf("idem: the batch claim returned the position %d of %d keys", pos, n)
		}
		claimed[pos-1], fresh[pos-1] = true, isFresh
	}
	rows.Close()
	return claimed, fresh, rows.Err()
}

// lookup reads the rows of the keys the batch did not claim (lost, indexes
// into b.primary) and decides their messages: Duplicate with the stored
// result, ErrKeyReused, ErrInProgress. With rollbackFirst the transaction is
// rolled back in the same round trip, before the lookup. An error means the
// lookup failed and nothing was decided.
func (b *batch[M, R]) lookup(ctx context.Context, conn *pgx.Conn, lost []int, keys [][]any, rollbackFirst bool) error {
	in := b.in
	groups := byPattern(keys)
	pb := pgutil.NewBatch(1 + len(groups))
	if rollbackFirst {
		pb.Queue("rollback")
	}
	for _, g := range groups {
		q := in.sql.batchLookupKeys(pick(keys, g), g.nulls)
		pb.Queue(q.sql, q.args...)
	}
	br := conn.SendBatch(ctx, pb)
	rows := make([]lookupRow, len(lost))
	err := func() error {
		if rollbackFirst {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		return readLookups(br, groups, rows)
	}()
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return err
	}
	for k, j := range lost {
		i := b.primary[j]
		if !rows[k].found {
			b.decide(ctx, i, idem.Result[R]{Err: in.retryable(b.keys[i], errors.New("idem: the claim conflicted with an inbox row that was gone when read back"))})
			continue
		}
		b.decideRow(ctx, i, rows[k])
	}
	return nil
}

// lookupRow is a key's committed inbox row, as a batch lookup reads it.
type lookupRow struct {
	fp, stored []byte
	status     string
	found      bool
}

// readLookups reads the batch lookups of groups (batchLookupKeys, one per
// null pattern) into rows, by the keys' positions.
func readLookups(br pgx.BatchResults, groups []patternKeys, rows []lookupRow) error {
	for _, g := range groups {
		rs, err := br.Query()
		if err != nil {
			return err
		}
		for rs.Next() {
			var pos int64
			var r lookupRow
			if err := rs.Scan(&pos, &r.fp, &r.status, &r.stored); err != nil {
				rs.Close()
				return err
			}
			if pos < 1 || pos > int64(len(g.at)) {
				rs.Close()
				return fmt.Errorf("idem: the batch lookup returned the position %d of %d keys", pos, len(g.at))
			}
			r.found = true
			rows[g.at[pos-1]] = r
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return err
		}
	}
	return nil
}

// decideRow decides message i by its key's committed row: Duplicate with
// the stored result, ErrKeyReused, or (a running row) Handle after the
// batch, which takes the key over.
func (b *batch[M, R]) decideRow(ctx context.Context, i int, r lookupRow) {
	in, key := b.in, b.keys[i]
	switch same, err := sameFingerprint(r.fp, b.fps[i]); {
	case err != nil:
		b.decide(ctx, i, idem.Result[R]{Err: in.fail(key, err)})
	case !same:
		b.decide(ctx, i, idem.Result[R]{Err: in.fail(key, idem.ErrKeyReused)})
	case r.status == statusRunning:
		// Committed, yet running: a handler ended its transaction
		// through SQL. Handle takes it over, after the batch.
		b.running = append(b.running, i)
	case r.status != statusDone:
		b.decide(ctx, i, idem.Result[R]{Err: in.fail(key, idem.ErrInProgress)})
	default:
		v, err := decodeResult[R](in.noResult, r.stored)
		if err != nil {
			b.decide(ctx, i, idem.Result[R]{Err: in.fail(key, err)})
			return
		}
		b.decide(ctx, i, idem.Result[R]{Value: v, Outcome: idem.Duplicate})
	}
}

// errBatchRolledBack says that complete's round trip stopped before the
// COMMIT: nothing was committed, and the messages can be delivered again.
var errBatchRolledBack = errors.New("idem: the batch was rolled back before its commit")

// complete marks the keys' rows done with their results (for a handler with
// a result: the rows of one without were born done), deletes the rows of
// the batch's stale messages (stale), writes the outbox rows, checks that
// the connection is still in the claim's transaction and commits, in one
// round trip (one UPDATE, and DELETE, per null pattern of the keys), then
// has the relays woken (see Inbox.complete). errBatchRolledBack: nothing
// committed; any other error: the COMMIT's outcome is unknown.
func (b *batch[M, R]) complete(ctx context.Context, conn *pgx.Conn, keys [][]any, results []string, outs []*idem.Outbox, stale [][]any) error {
	in := b.in
	var groups []patternKeys // the rows to mark done with their results
	if in.sql.result {
		groups = byPattern(keys)
	}
	staleGroups := byPattern(stale)
	pb := pgutil.NewBatch(5 + len(groups) + len(staleGroups))
	for _, g := range groups {
		q := in.sql.batchCompleteKeys(pick(keys, g), g.nulls, pick(results, g))
		pb.Queue(q.sql, q.args...)
	}
	for _, g := range staleGroups {
		q := in.sql.batchForgetKeys(pick(stale, g), g.nulls)
		pb.Queue(q.sql, q.args...)
	}
	published := queueOutgoing(pb, in.table.Consumer, in.fields, keys, outs)
	pb.Queue(claimCheck)
	tags, err := b.commitQueued(ctx, conn, pb, published)
	var updated int64
	for _, tag := range tags[:min(len(groups), len(tags))] {
		updated += tag.RowsAffected()
	}
	switch {
	case err != nil:
		return err
	case in.sql.result && updated != int64(len(keys)):
		// Committed, but some rows did not get their result: a handler
		// deleted an inbox row. The messages are done; say so.
		return fmt.Errorf("idem: %d of %d inbox rows were gone when the batch's results were stored; did a handler delete them?", int64(len(keys))-updated, len(keys))
	}
	return nil
}

// runOptimistic is the batch's transaction on conn, optimistic as Handle's
// (see Inbox.handle). BEGIN, the transaction's marker and the lookup of
// every key go in one round trip; the keys found committed are decided by
// their rows. The handler runs on the others. Their rows, with their
// results, the outbox rows and COMMIT go in one more round trip (one
// INSERT of all rows). When that INSERT meets a concurrent delivery's row,
// the batch rolls back and each of its messages goes through Handle. It
// returns the messages to deliver one by one.
func (b *batch[M, R]) runOptimistic(ctx context.Context, conn *pgx.Conn) (retry []int) {
	in := b.in
	keys := make([][]any, len(b.primary))
	for j, i := range b.primary {
		keys[j] = b.keys[i]
	}
	groups := byPattern(keys)
	pb := pgutil.NewBatch(2 + len(groups))
	pb.BeginTx(in.txOptions)
	pb.Queue(markSQL)
	for _, g := range groups {
		q := in.sql.batchLookupKeys(pick(keys, g), g.nulls)
		pb.Queue(q.sql, q.args...)
	}
	br := conn.SendBatch(ctx, pb)
	rows := make([]lookupRow, len(keys))
	err := func() error {
		for range 2 { // BEGIN, the marker
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		return readLookups(br, groups, rows)
	}()
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	tx := br.Tx()
	if err != nil {
		// Nothing decided: each message on its own.
		pgutil.Rollback(ctx, conn)
		return b.primary
	}

	var won []int // indexes into b.primary
	for j, i := range b.primary {
		if rows[j].found {
			b.decideRow(ctx, i, rows[j])
			continue
		}
		won = append(won, j)
	}
	fallback := func() []int {
		pgutil.Rollback(ctx, conn)
		retry = retry[:0]
		for _, j := range won {
			retry = append(retry, b.primary[j])
		}
		return retry
	}
	if len(won) == 0 {
		pgutil.Rollback(ctx, conn)
		return nil
	}
	wonMsgs := make([]M, len(won))
	for k, j := range won {
		wonMsgs[k] = b.msgs[b.primary[j]]
	}
	values, outs, err := in.runHandler(ctx, conn, tx, wonMsgs)
	if err != nil {
		return fallback()
	}
	encoded := make([]*string, len(won))
	for k, v := range values {
		enc, err := encodeResult(in.noResult, v)
		if err != nil {
			return fallback()
		}
		if !in.noResult {
			text := string(enc)
			encoded[k] = &text
		}
	}
	if in.beforeCommit != nil {
		if err := runBeforeCommit(ctx, conn, tx, in.beforeCommit); err != nil {
			return fallback()
		}
	}
	if err := stillInTransaction(conn); err != nil || conn.PgConn().TxStatus() == txFailed {
		return fallback()
	}
	wonKeys, wonFPs := make([][]any, len(won)), make([][]byte, len(won))
	for k, j := range won {
		i := b.primary[j]
		wonKeys[k], wonFPs[k] = b.keys[i], b.fps[i]
	}
	switch err := b.insert(ctx, conn, wonKeys, wonFPs, encoded, outs); {
	case err == nil:
	case errors.Is(err, errBatchRolledBack):
		// A concurrent delivery's row, a wait past the claim wait, a
		// missing partition, a serialization failure: each message on
		// its own resolves it.
		return fallback()
	default:
		// The COMMIT failed: its outcome is unknown, and the redeliveries
		// resolve it (Duplicate, or processed).
		for _, j := range won {
			i := b.primary[j]
			b.decide(ctx, i, idem.Result[R]{Err: in.fail(b.keys[i], err)})
		}
		return nil
	}
	for k, j := range won {
		b.decide(ctx, b.primary[j], idem.Result[R]{Value: values[k], Outcome: idem.Processed})
	}
	return nil
}

// insert writes the rows of keys, done, with their results (one INSERT,
// batchInsertSQL), and the outbox rows, and commits, in one round trip;
// then it has the relays woken. errBatchRolledBack: nothing committed; any
// other error: the COMMIT's outcome is unknown.
func (b *batch[M, R]) insert(ctx context.Context, conn *pgx.Conn, keys [][]any, fps [][]byte, results []*string, outs []*idem.Outbox) error {
	in := b.in
	pb := pgutil.NewBatch(3)
	q := in.sql.batchInsertKeys(keys, fps, results, in.lockWait)
	pb.Queue(q.sql, q.args...)
	published := queueOutgoing(pb, in.table.Consumer, in.fields, keys, outs)
	_, err := b.commitQueued(ctx, conn, pb, published)
	return err
}

// commitQueued sends the statements queued on pb and COMMIT in one round
// trip, and returns each statement's tag. A statement that fails stops
// the round trip: the transaction is rolled back, and the error is
// errBatchRolledBack, as is a COMMIT that rolled back (a handler's failed
// statement aborted the transaction). Otherwise it wakes the relays for the
// published rows, committed or maybe committed; a failed COMMIT's outcome is
// unknown, and the redeliveries resolve it.
func (b *batch[M, R]) commitQueued(ctx context.Context, conn *pgx.Conn, pb *pgx.Batch, published int) ([]pgconn.CommandTag, error) {
	n := pb.Len()
	br, done, err := sendCommit(ctx, conn, pb)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBatchRolledBack, err)
	}
	defer done()
	tags := make([]pgconn.CommandTag, 0, n)
	for range n {
		var tag pgconn.CommandTag
		if tag, err = br.Exec(); err != nil {
			break
		}
		tags = append(tags, tag)
	}
	before := err != nil // err comes from a statement before the COMMIT
	var committed pgconn.CommandTag
	if err == nil {
		committed, err = br.Exec()
	}
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	switch {
	case err != nil && before:
		pgutil.Rollback(ctx, conn)
		return tags, fmt.Errorf("%w: %w", errBatchRolledBack, err)
	case err == nil && committed.String() == "ROLLBACK":
		return tags, errBatchRolledBack
	}
	b.in.wake.committed(published)
	if err != nil {
		return tags, fmt.Errorf("idem: store the batch's results and commit: %w", err)
	}
	return tags, nil
}
