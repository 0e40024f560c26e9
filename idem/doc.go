// Package idem is the runtime behind the wrappers idemgen generates: it runs a
// message handler at most once per (consumer, key), in one PostgreSQL
// transaction with the inbox row that records the key.
//
// This package is what users call: the outcomes and errors of a delivery and
// [ActionFor], the options of the generated wrappers ([Option]), the
// [Outbox] a publishing handler writes to, the relay.Relay that publishes it, the
// [Janitor] that keeps the tables, and the interfaces the broker adapters take
// ([Handler], [BatchHandler]). A generated wrapper declares the handler's
// inbox table (its name and key columns) and hands it to the delivery engine
// in package idemimpl, which only generated code calls; the protocol lives
// there, once, for every handler:
//
//  1. Validate the key and fingerprint the message: a scheme byte and the
//     SHA-256 of its canonical encoding (fields sorted, zero fields left out,
//     so that a type that gains a field keeps its fingerprints), or of
//     [Fingerprinter].
//  2. Call the handler. In one round trip, BEGIN and the key's lookup go in
//     front of its first statement. A committed row for the key stops the
//     delivery: the handler's statements fail, everything rolls back, and
//     the row answers. Same fingerprint: [Duplicate] with the stored
//     result; different: [ErrKeyReused].
//  3. Then the [WithBeforeCommit] hook, if there is one. An error or a
//     panic rolls everything back (the panic is re-raised). A handler that
//     ends the transaction through SQL (ROLLBACK, COMMIT) has every later
//     statement refused, and its delivery fails saying so.
//  4. In one round trip: INSERT the inbox row, done, with the result
//     (failing outside the delivery's transaction), write the messages a
//     publishing handler buffered in its [Outbox] (one INSERT into
//     idem_outbox), and COMMIT. Then return [Processed]; the caller acks.
//     A NOTIFY shared by the commits of a few milliseconds wakes the
//     relays. A relay.Relay publishes the committed outbox rows, at least
//     once each, with their stable ids ([OutgoingMessageID]).
//  5. A concurrent copy's row fails the INSERT with a unique violation:
//     roll back and read that row in a fresh snapshot. So a concurrent copy
//     may run the handler, but it never commits.
//
// [WithPessimisticClaim] claims the key before the handler runs instead
// (INSERT ... ON CONFLICT DO NOTHING, bounded by the claim wait): a
// concurrent copy waits at its claim and never runs the handler. A table
// with a stale-message guard always claims first, recording the entity's
// version in the same statement ([ErrStale] for an older one). So does a
// partitioned inbox: its claim finds a dropped partition
// ([ErrOutsideWindow]) before the handler runs.
//
// A stored result that no longer decodes is [ErrUndecodableResult]; a message
// or result that cannot be encoded (NaN, ±Inf) is [ErrUnencodable]: both fail
// the same way on every delivery, so dead-letter them. A wrapper's constructor
// panics on an option that would make every delivery fail. Duplicates of a key
// in flight in this process wait for a connection only within the claim wait.
//
// Handlers whose effect is outside the database (a payment, an e-mail) run in
// mode=external instead: a short statement claims the key with a lease and a
// fence, the handler runs with no transaction open and the idempotency key to
// give the provider in its context ([KeyFrom]), heartbeats renew the claim
// while it runs and cancel its context when the claim is lost, and the key is
// marked done only while the fence is still the worker's ([ErrClaimLost]
// otherwise). A redelivery takes over a claim whose lease ran out, and the
// wrapper's Sweep (or a [Janitor]) resets such claims and reports the ones that
// keep failing. docs/external.md has the protocol and its failure cases.
//
// Handlers that need no inbox row run in mode=entity (the business row the
// handler inserts is the marker; BEGIN and the message's fingerprint travel
// with its first statement, a unique violation of the table's key constraint is
// the duplicate signal, and the row's fingerprint column tells [Duplicate] from
// [ErrKeyReused]) or in mode=natural (a transaction, retried on serialization
// failures, nothing recorded). docs/natural.md has both.
//
// [ActionFor] turns what Handle returned into what the consumer does with the
// message, so that no caller re-derives the policy: [Ack] when the error is
// nil (both [Processed] and [Duplicate] mean the message's effect is
// committed) and for [ErrStale] (the message is obsolete); [DeadLetter] for
// what fails the same way on every delivery ([ErrKeyReused],
// [ErrInvalidKey], [ErrUnencodable], [ErrUndecodableResult],
// [ErrUndecodablePayload]); [Retry] for everything else, the handler's own
// errors, lost connections and an unknown commit included.
package idem
