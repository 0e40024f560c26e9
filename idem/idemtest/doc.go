// Package idemtest proves a handler's guarantee against a real PostgreSQL.
// The tests idemgen generates in idem_gen_test.go are one suite per handler,
// and this is where what they prove is written down, once.
//
// # Suites
//
// Each scenario is a subtest in a fresh schema with the package's goose
// migrations applied (New). Suite runs them for mode=tx handlers:
//
//   - effect: one delivery of the message, in each of two fresh schemas,
//     changes the state of the test schema (ScenarioEffect);
//   - concurrent_deliveries: N deliveries at once (16, or
//     IDEMGEN_TEST_DELIVERIES) give one Processed and N-1 Duplicates with
//     equal results, the handler run once, one inbox row;
//   - failure_before_commit: a delivery whose connection dies before its
//     commit leaves nothing, and the redelivery is processed once;
//   - crash_after_commit: the redelivery after a worker died before its ack
//     is a Duplicate and does not run the handler;
//   - key_reused: the key with another payload gets idem.ErrKeyReused;
//   - sequential_duplicate: a second delivery is a Duplicate;
//   - business_unique_violation: a unique violation of the handler's own
//     write is its error, never a Duplicate (with Fixture.Conflict);
//   - the batch scenarios of HandleBatch (ScenarioBatchKeyTwice and the
//     others), those of set-based handlers (ScenarioBatchFreshMessages and
//     the others) and those of partitioned inboxes (ScenarioBucketEdge and
//     the others).
//
// EntitySuite runs Suite's scenarios for mode=entity, counting the business
// table's fingerprinted rows, plus ScenarioKilledMidTransaction (a process
// killed with SIGKILL inside its transaction). NaturalSuite runs
// ScenarioRedelivery, ScenarioConcurrentRedeliveries, ScenarioInterleaved and
// ScenarioFailureBeforeCommit for mode=natural: the state after a redelivery
// must be the state after one delivery. ExternalSuite runs the
// claim-call-done scenarios of mode=external (ScenarioExternalConcurrent
// and the others), with a Provider double that deduplicates by idempotency
// key as payment APIs do. The constants' docs say what each scenario checks.
//
// # The effect
//
// Without a fixture that counts it (Fixture.Effect), the scenarios judge a
// handler's effect by the database itself: the rows of every table of the
// test schema but idemgen's own, before and after. ScenarioEffect learns
// what one delivery leaves; the columns whose values differ between its two
// deliveries (a clock, a random id) and identity columns are not compared.
// Then a duplicate, a reused key and N concurrent copies must leave the
// state one delivery leaves, and a delivery that fails or is killed before
// its commit must leave the state as it was. A handler that writes through
// its service's pool instead of its tx, or whose effect grows with every
// run, fails, and the failure names the rows and the cause:
//
//	the delivery abandoned before its commit left 1 row in orders where the state
//	before it had none: the handler writes outside its transaction (through a pool?)
//
// In mode=external no transaction is open while the handler runs, so its
// writes through a pool are its effect, as a provider call is: a takeover
// or a failed run runs it again, and the state must still be one
// delivery's, which holds when the write is keyed by idem.KeyFrom(ctx).
//
// # Without a fixture
//
// A handler without fixture= gets Sampled (SampledExternal,
// SampledNatural): Sample's message, every field set, and a receiver whose
// fields of database handle types hold the scenario's pool (and, in
// mode=external, whose fields of an interface Provider satisfies hold the
// scenario's Provider). A first delivery that fails, or changes nothing,
// fails the test with the fixture to write; a fixture seeds the data the
// handler needs and chooses its message (Fixture, ExternalFixture,
// NaturalFixture).
//
// # The database
//
// DatabaseURL finds the test database: IDEMGEN_TEST_DATABASE_URL, else the
// server where libpq looks (the PG* variables, the local socket, then
// localhost:5432), never DATABASE_URL, since a developer's shell often
// points that at a real database and these tests create and drop schemas.
// When no server answers, the tests are skipped with one line that says
// what to set; when CI or IDEMGEN_REQUIRE_DB is set they fail instead, so
// that no database test is skipped unnoticed.
package idemtest
