package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemgen/idemgen/bench/internal/mdtable"
	"github.com/idemgen/idemgen/bench/internal/stats"
)

// brokerTitle is how the tables name a broker.
func brokerTitle(b string) string {
	switch b {
	case "rabbitmq":
		return "RabbitMQ"
	case "jetstream":
		return "NATS JetStream"
	case "kafka":
		return "Kafka (kfake, in-process)"
	}
	return b
}

// brokerShort names a broker in a line of the Targets table.
func brokerShort(b string) string {
	if b == "kafka" {
		return "Kafka (kfake)"
	}
	return brokerTitle(b)
}

// brokersTargets writes the brokers part's lines of the Targets table; the
// relay's against the recording publisher are lines not run when the part
// did not run.
func (r *report) brokersTargets(t *targetTable) {
	if b := r.brokers; b != nil {
		consume := target{doc: "consuming-through-a-broker", what: "consume → wrapper → commit → ack against raw consume-and-ack, reported", status: reported}
		publish := target{doc: "the-relay-through-a-broker", what: "the relay against a raw publisher with confirms, reported", status: reported}
		var cons, pub []string
		var consCells, pubCells []*cell
		hi := slices.Max(b.workers)
		for _, name := range b.brokers {
			for _, n := range b.workers {
				wc, rc := b.consumeCell(name, n, false), b.consumeCell(name, n, true)
				q := mdtable.Ratio(wc.summary().rate / rc.summary().rate)
				consume.why.add(fmt.Sprintf("%s at %d %s, wrapper ÷ raw", brokerTitle(name), n, plural(n, "worker")), "%s", q)
				if n == hi {
					cons = append(cons, name+" "+q)
				}
				consCells = append(consCells, wc, rc)
			}
			rl, rw := b.relayCell(name, false), b.relayCell(name, true)
			pub = append(pub, fmt.Sprintf("%s %s", name, mdtable.Ratio(rl.summary().rate/rw.summary().rate)))
			pubCells = append(pubCells, rl, rw)
		}
		consume.measured = fmt.Sprintf("at %d: %s", hi, strings.Join(cons, ", "))
		consume.busy = busyOf(consCells...)
		t.add(consume)
		publish.measured, publish.busy = strings.Join(pub, ", "), busyOf(pubCells...)
		t.add(publish)
		if p := b.peer; p != nil {
			is, ws := p.latencies(0, modeSteady), p.latencies(1, modeSteady)
			l := target{doc: "against-watermills-outbox", what: "idemgen's outbox against Watermill's on RabbitMQ, reported", status: reported,
				measured: fmt.Sprintf("burst %s / %s msgs/s, backlog %s / %s", mdtable.Thousands(p.pooled(0, modeBurst)), mdtable.Thousands(p.pooled(1, modeBurst)),
					mdtable.Thousands(p.pooled(0, modeBacklog)), mdtable.Thousands(p.pooled(1, modeBacklog)))}
			l.why.add("messages of the burst and of the backlog", "%s", mdtable.Int(p.burst))
			l.why.add("idemgen / Watermill (its defaults), committed and delivered in a burst", "%s / %s msgs/s", mdtable.Thousands(p.pooled(0, modeBurst)), mdtable.Thousands(p.pooled(1, modeBurst)))
			l.why.add("idemgen / Watermill, relayed from a backlog", "%s / %s msgs/s", mdtable.Thousands(p.pooled(0, modeBacklog)), mdtable.Thousands(p.pooled(1, modeBacklog)))
			l.why.add(fmt.Sprintf("idemgen / Watermill, commit to delivery at %d msgs/s, p50", p.rate), "%s / %s", mdtable.Dur(stats.Percentile(is, 50)), mdtable.Dur(stats.Percentile(ws, 50)))
			l.why.add(fmt.Sprintf("idemgen / Watermill, commit to delivery at %d msgs/s, p99", p.rate), "%s / %s", mdtable.Dur(stats.Percentile(is, 99)), mdtable.Dur(stats.Percentile(ws, 99)))
			t.add(l)
		}
	}
	for _, l := range r.relayVsRecordingTargets() {
		t.add(l)
	}
}

// pooled is a side's throughput over its rounds: messages over time.
func (p *peerResults) pooled(side int, mode peerMode) float64 {
	var msgs int
	var elapsed time.Duration
	for _, r := range p.runs[peerKey{side, mode}] {
		msgs += r.msgs
		elapsed += r.elapsed
	}
	if elapsed <= 0 {
		return 0
	}
	return float64(msgs) / elapsed.Seconds()
}

// latencies are a side's latencies over its rounds, sorted.
func (p *peerResults) latencies(side int, mode peerMode) []time.Duration {
	var all []time.Duration
	for _, r := range p.runs[peerKey{side, mode}] {
		all = append(all, r.lat...)
	}
	slices.Sort(all)
	return all
}

func (r *report) writeBrokers(w writer) {
	b, cfg := r.brokers, r.cfg
	w("## %s\n\n", secBrokers)
	w("The generated wrapper between a real broker and the database, through idem's adapters, each measured against the same broker library doing the same broker work with no database: the ceiling. ")
	w("RabbitMQ is the node at `%s` (durable classic queues), NATS JetStream the server at `%s` (file-storage streams), both on this machine and shared with its other users. ", redactURL(b.amqpURL), b.natsURL)
	w("**Kafka is kfake** (`github.com/twmb/franz-go/pkg/kfake`), franz-go's in-process cluster speaking the Kafka protocol, one broker, started fresh for each cell in the bench's own process: no Kafka server runs here, so its numbers are not a real Kafka's, and its ceiling is kfake's in-process one (its broker work competes with the consumer for the same cores). ")
	w("Every cell has a fresh queue, stream or topic (and a fresh schema where the database takes part), deleted afterwards; %d %s (`-rounds`) ran them interleaved, the order of the brokers and of each pair rotating from round to round. **Busy** is how busy the whole machine was, the other users included.\n\n", cfg.rounds, plural(cfg.rounds, "round"))

	w("### Consuming: the wrapper against the broker's ceiling\n\n")
	w("A backlog of %s `ledger.Deposit` messages (JSON, each with its own `message_id`), published beforehand, then consumed at each concurrency:\n\n", mdtable.Thousands(float64(b.msgs)))
	w("- **wrapper**: the adapter's consumer (`rabbitmq.NewConsumer`, `jetstream.NewConsumer`, `kafka.NewConsumer` with `WithWorkers(n)` and the other options at their defaults) delivering to `ledger.PostIdem`, the generated wrapper, in batches (the adapters' default for a wrapper, `WithBatch`: what the broker hands a worker at once, at most 100 messages, one `DeliverBatch` and so one transaction for them): decode, claim the keys, the UPDATEs, commit, then ack each message (RabbitMQ `basic.ack`; JetStream `DoubleAck`; Kafka the offsets committed after each poll). The pool has as many connections as workers; afterwards the inbox held exactly one key per message and the broker had nothing left unacknowledged (checked);\n")
	w("- **raw**: the same library with no database and the same concurrency and prefetch: amqp091 with a prefetch of twice the workers, n goroutines that decode and ack; a jetstream `Messages` pull of twice the workers feeding n goroutines that decode and `DoubleAck`; a franz-go group member (auto-commit off, rebalances blocked during a poll) decoding each poll's partitions n at a time and committing the offsets after each poll.\n\n")
	w("The rate is measured from the message that ends the first tenth (connection, group join and warm-up excluded) to the last. ")
	w("Kafka's topic has %d partitions (its consumers run at most one handler per partition at a time, so the partitions bound the concurrency); its records were spread round-robin.\n\n", b.partitions)
	consume := mdtable.New(mdtable.L("broker"), mdtable.R("workers"), mdtable.R("wrapper msgs/s"), mdtable.R("raw msgs/s"), mdtable.R("wrapper / raw"),
		mdtable.L("per round (wrapper, raw)"), mdtable.R("busy"))
	for _, name := range b.brokers {
		for _, n := range b.workers {
			wc, rc := b.consumeCell(name, n, false), b.consumeCell(name, n, true)
			ws, rs := wc.summary(), rc.summary()
			consume.Row(brokerTitle(name), mdtable.Int(n), mdtable.Thousands(ws.rate), mdtable.Thousands(rs.rate), cellRatio(wc, rc), perRound(wc, rc), mdtable.Percent((ws.busy+rs.busy)/2))
		}
	}
	w("%s", consume)
	w("\nThe ratio in brackets is the range of the per-round ratios. The ceiling is what the broker and its client library cost alone; the wrapper adds the database's transaction per batch (two round trips and a commit's WAL flush, plus the handler's UPDATE per message, as in the [batches](#batches) table), which on this machine is the larger part.\n\n")

	w("### Publishing: relay.Relay against a raw publisher\n\n")
	w("A backlog of %s outbox rows written beforehand through `ledger.NewPublishingPost` (%d messages per delivery, without NOTIFY), then published by one `relay.New` (default options: batches of 100, the rows claimed, published, marked) through the adapter's publisher (`rabbitmq.NewPublisher`, publisher confirms; `jetstream.NewPublisher`, `PublishMsgAsync` and the PubAcks; `kafka.NewPublisher`, franz-go's idempotent producer with acks from all in-sync replicas). ", mdtable.Thousands(float64(b.relayRows)), fillMessages)
	w("Against it, the **raw publisher**: the same messages (the same stable ids as the broker's message id, the same bodies) published with the same library, in batches of the relay's size, all of a batch in flight, then their confirms awaited: amqp091 on a channel in confirm mode (persistent, mandatory); jetstream `PublishMsgAsync` with `Nats-Msg-Id`; franz-go `ProduceSync`. ")
	w("Beside both, once a round, the same relay over the same backlog with the **recording publisher** of the outbox part, which confirms every message at once: the relay's own rate, with a broker that costs nothing. ")
	w("The time runs from the start until every message is confirmed (and, for the relay, every row marked published); afterwards the destination held exactly the backlog (checked).\n\n")
	rec := b.relayCell(recordingName, false)
	publish := mdtable.New(mdtable.L("broker"), mdtable.R("relay msgs/s"), mdtable.R("raw msgs/s"), mdtable.R("relay / raw"), mdtable.R("relay / relay with the recording publisher"), mdtable.L("per round (relay, raw)"), mdtable.R("busy"))
	for _, name := range b.brokers {
		rl, rw := b.relayCell(name, false), b.relayCell(name, true)
		a, c := rl.summary(), rw.summary()
		publish.Row(brokerTitle(name), mdtable.Thousands(a.rate), mdtable.Thousands(c.rate), cellRatio(rl, rw), cellRatio(rl, rec), perRound(rl, rw), mdtable.Percent((a.busy+c.busy)/2))
	}
	w("%s", publish)
	rs := rec.summary()
	var recPer []string
	for _, smp := range rec.samples {
		recPer = append(recPer, mdtable.Thousands(smp.rate()))
	}
	w("\nThe relay with the recording publisher: %s msgs/s (per round: %s; busy %s). ", mdtable.Thousands(rs.rate), strings.Join(recPer, ", "), mdtable.Percent(rs.busy))
	w("While a full batch is at the broker, the relay claims the next one and deletes the one before in one round trip, so the broker's confirms and the database's work overlap: a batch costs the slower of the two, not their sum. The raw publisher waits only for the confirms.\n\n")

	if b.peer != nil {
		r.writePeer(w)
	}
	w("Order the brokers part went in:\n\n")
	for i, ord := range b.order {
		w("%d. %s\n", i+1, strings.Join(ord, "; "))
	}
	w("\n")
	r.writeBehind(w, secBrokers)
}

// perRound lists two cells' rates round by round.
func perRound(a, b *cell) string {
	var parts []string
	for i := range min(len(a.samples), len(b.samples)) {
		parts = append(parts, mdtable.Thousands(a.samples[i].rate())+", "+mdtable.Thousands(b.samples[i].rate()))
	}
	return strings.Join(parts, "; ")
}

func (r *report) writePeer(w writer) {
	p := r.brokers.peer
	w("### Against Watermill's outbox\n\n")
	w("The peer a Go team would pick instead: [Watermill](https://github.com/ThreeDotsLabs/watermill) (v1.5.1, watermill-sql v4.1.2, watermill-amqp v3.0.2), set up as its documentation and its transactional-events-forwarder example do: ")
	w("the business write and `sql.NewPublisher(sql.TxFromPgx(tx), DefaultPostgreSQLSchema)`, wrapped in `forwarder.NewPublisher`, in one pgx transaction; the `forwarder` component reading the table with a watermill-sql subscriber (`DefaultPostgreSQLSchema`, `DefaultPostgreSQLOffsetsAdapter`, batches of 100) and publishing to RabbitMQ through watermill-amqp's `NewDurableQueueConfig` with `ConfirmDelivery` on (off by default; without it the forwarder would count a message forwarded before RabbitMQ took it). ")
	w("Its subscriber polls (`PollInterval`, 1 s by default; it queries again at once while it finds rows), so it ran twice: with the default and with a 10 ms poll. ")
	w("idemgen's side is `ledger.NewPublishingPost` (the generated inbox's transaction: the claim, the same business write, one `out.Publish`, the result, and the outbox row with a NOTIFY in the commit) and one `relay.New` with its defaults (woken by the NOTIFY, polling every 1 s) publishing through `rabbitmq.NewPublisher`. ")
	w("Both publish the same `ledger.Credited` body (JSON, about 80 bytes) to a fresh durable classic queue on the same RabbitMQ, where one plain amqp091 consumer (auto-ack) records when each message first arrived; every message arrived (checked). ")
	w("%d producers on a pool of their own commit the deposits; the relay or the forwarder has a pool of its own (3 connections). A message's latency runs from its commit returning to the producer to its receipt.\n\n", p.producers)
	w("- **burst**: %s messages, the producers committing as fast as they can while the relay runs; throughput is the messages over the time from the first commit to the last receipt; **commits/s** is the producers' own rate: where the delivery rate stays below it the relay or the forwarder is the bound, where the two match the producers are;\n", mdtable.Thousands(float64(p.burst)))
	w("- **backlog**: the same %s messages committed first, then the relay or the forwarder started: its own throughput, from its start to the last receipt;\n", mdtable.Thousands(float64(p.burst)))
	w("- **steady**: %d messages per second at even intervals for %s after a %s warm-up (not counted): latency.\n\n", p.rate, p.duration, p.warmup)
	burst := mdtable.New(mdtable.L("outbox"), mdtable.R("burst msgs/s"), mdtable.L("per round"), mdtable.R("commits/s"), mdtable.R("burst p50"), mdtable.R("burst p99"),
		mdtable.R("backlog msgs/s"), mdtable.L("per round"), mdtable.R("received twice"))
	for si, side := range peerSides {
		lat := p.latencies(si, modeBurst)
		var commits time.Duration
		var msgs int
		for _, run := range p.runs[peerKey{si, modeBurst}] {
			commits += run.commits
			msgs += run.msgs
		}
		burst.Row(side.name, mdtable.Thousands(p.pooled(si, modeBurst)), p.perRound(si, modeBurst), mdtable.Thousands(float64(msgs)/commits.Seconds()),
			mdtable.Dur(stats.Percentile(lat, 50)), mdtable.Dur(stats.Percentile(lat, 99)), mdtable.Thousands(p.pooled(si, modeBacklog)), p.perRound(si, modeBacklog),
			fmt.Sprint(p.dups(si, modeBurst)+p.dups(si, modeBacklog)))
	}
	steady := mdtable.New(mdtable.L("outbox"), mdtable.R("messages"), mdtable.R("p50"), mdtable.R("p90"), mdtable.R("p99"), mdtable.R("max"), mdtable.R("received twice"))
	for si, side := range peerSides {
		lat := p.latencies(si, modeSteady)
		maxLat := time.Duration(0)
		if len(lat) > 0 {
			maxLat = lat[len(lat)-1]
		}
		steady.Row(side.name, mdtable.Int(len(lat)), mdtable.Dur(stats.Percentile(lat, 50)), mdtable.Dur(stats.Percentile(lat, 90)), mdtable.Dur(stats.Percentile(lat, 99)),
			mdtable.Dur(maxLat), fmt.Sprint(p.dups(si, modeSteady)))
	}
	w("%s\nSteady, %d msgs/s, commit to delivery:\n\n%s", burst, p.rate, steady)
	ib, wb, wf := p.pooled(0, modeBurst), p.pooled(1, modeBurst), p.pooled(2, modeBurst)
	ik, wk, wfk := p.pooled(0, modeBacklog), p.pooled(1, modeBacklog), p.pooled(2, modeBacklog)
	is, ws, wfs := p.latencies(0, modeSteady), p.latencies(1, modeSteady), p.latencies(2, modeSteady)
	w("\nidemgen against Watermill (its defaults, then the 10 ms poll): burst throughput %s and %s; the relay's own throughput over the backlog %s and %s; at the steady rate Watermill's p50 latency is %s and %s idemgen's, its p99 %s and %s.\n\n",
		mdtable.Ratio(ib/wb), mdtable.Ratio(ib/wf), mdtable.Ratio(ik/wk), mdtable.Ratio(ik/wfk),
		mdtable.Ratio(float64(stats.Percentile(ws, 50))/float64(stats.Percentile(is, 50))), mdtable.Ratio(float64(stats.Percentile(wfs, 50))/float64(stats.Percentile(is, 50))),
		mdtable.Ratio(float64(stats.Percentile(ws, 99))/float64(stats.Percentile(is, 99))), mdtable.Ratio(float64(stats.Percentile(wfs, 99))/float64(stats.Percentile(is, 99))))
	w("What each side guarantees differs, and the numbers should be read with it:\n\n")
	w("- **Downstream deduplication.** idemgen's rows carry a stable id (the consumer, the key of the message being handled, the position), sent as the AMQP `message_id`; a relay's second try of a row, or the handler's transaction run again for a redelivered input, produces the same id, and the next consumer's idemgen inbox turns it into a `Duplicate`. Watermill's forwarder gives the message the UUID the producer chose (`watermill.NewUUID()` per publish, as its examples do), carried in its own `_watermill_message_uuid` header, not `message_id`; a second forward after a crash between the publish and the offset ack delivers it again with nothing downstream that drops it unless the consumer keys on that header itself, and a retried business transaction publishes a new UUID.\n")
	w("- **Inbound deduplication.** idemgen's side also claims the incoming message's key in the same transaction (the inbox row and the stored result): a redelivered deposit is not applied or published twice. Watermill's side here is the outbox alone, one write fewer per transaction, and no NOTIFY, so its producers commit faster (commits/s above); Watermill leaves deduplication of the input to the application (its router's `Deduplicator` middleware keeps the ids it saw in an expiring repository, in memory by default, outside the business transaction).\n")
	w("- **Ordering and parallel relays.** Watermill's PostgreSQL subscriber reads rows in transaction-id order, only those below the oldest transaction still running on the server (`pg_snapshot_xmin`), so one long transaction anywhere on the server, in any database, holds delivery back; it forwards one message at a time, each publish awaiting its confirm, and the subscribers of one consumer group take turns (the group's offsets row is locked `FOR UPDATE` while a batch is forwarded). idem's relay claims batches with `FOR UPDATE SKIP LOCKED` under a lease, publishes a batch with all its messages in flight, and several relays share one table; it keeps no order by default, and each ordering key's order in ordered mode (`relay.WithOrdered`).\n")
	w("- **Latency.** Watermill's forwarder finds new rows when it polls; idem's relay is woken by the commit's NOTIFY (the NOTIFY's cost at commit is in the [outbox](#notify-and-committing-throughput) section), and polls as a fallback.\n\n")
}

// perRound lists a side's throughput in each round.
func (p *peerResults) perRound(side int, mode peerMode) string {
	var per []string
	for _, run := range p.runs[peerKey{side, mode}] {
		per = append(per, mdtable.Thousands(run.rate()))
	}
	return strings.Join(per, ", ")
}

// dups adds up the messages a side's runs received twice.
func (p *peerResults) dups(side int, mode peerMode) int {
	n := 0
	for _, run := range p.runs[peerKey{side, mode}] {
		n += run.dups
	}
	return n
}

// redactURL hides the password of a URL for the report.
func redactURL(u string) string {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u
	}
	cred, host, ok := strings.Cut(rest, "@")
	if !ok {
		return u
	}
	user, _, _ := strings.Cut(cred, ":")
	return scheme + "://" + user + "@" + host
}
