package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgen/idemgen/bench/ledger"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/consumer"
	idemjs "github.com/idemgen/idemgen/idem/jetstream"
)

// jsKind is the NATS server at url with JetStream: file-storage streams, one
// per cell, deleted afterwards.
type jsKind struct {
	nc *nats.Conn
	js jetstream.JetStream
}

func newJetStream(ctx context.Context, url string) (*jsKind, error) {
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.Name("idem bench"))
	if err != nil {
		return nil, fmt.Errorf("NATS is not reachable at %s (-nats): %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err == nil {
		_, err = js.AccountInfo(ctx)
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("JetStream at %s: %w", url, err)
	}
	return &jsKind{nc: nc, js: js}, nil
}

func (k *jsKind) name() string { return "jetstream" }
func (k *jsKind) close()       { k.nc.Close() }

type jsSource struct {
	k   *jsKind
	top idemjs.Topology
	n   int
}

func (k *jsKind) source(ctx context.Context, tag string, msgs []wireMsg, _ int) (source, error) {
	top := idemjs.Topology{Stream: tag, Subjects: []string{tag + ".work"}, Consumer: "bench", AckWait: 30 * time.Second}
	if err := idemjs.Declare(ctx, k.js, top); err != nil {
		return nil, err
	}
	src := &jsSource{k: k, top: top, n: len(msgs)}
	out := make([]idem.OutgoingMessage, len(msgs))
	for i, m := range msgs {
		out[i] = idem.OutgoingMessage{ID: m.id, Payload: m.body}
	}
	if err := k.publishAsync(ctx, tag+".work", out, 1000); err != nil {
		src.close()
		return nil, fmt.Errorf("publish the backlog: %w", err)
	}
	return src, nil
}

// publishAsync publishes msgs to subject with PublishMsgAsync, the id as
// Nats-Msg-Id, batch at a time: every message of a batch in flight, then
// their PubAcks awaited.
func (k *jsKind) publishAsync(ctx context.Context, subject string, msgs []idem.OutgoingMessage, batch int) error {
	futures := make([]jetstream.PubAckFuture, 0, batch)
	for start := 0; start < len(msgs); start += batch {
		futures = futures[:0]
		for _, m := range msgs[start:min(start+batch, len(msgs))] {
			msg := nats.NewMsg(subject)
			msg.Data = m.Payload
			msg.Header.Set(jetstream.MsgIDHeader, m.ID)
			f, err := k.js.PublishMsgAsync(msg)
			if err != nil {
				return err
			}
			futures = append(futures, f)
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

func (s *jsSource) consumeIdem(ctx context.Context, h idem.Handler[ledger.Deposit], workers int) error {
	return idemjs.NewConsumer(s.k.js, s.top, h, consumer.WithWorkers(workers), consumer.WithLogger(quietLog)).Run(ctx)
}

// consumeRaw is nats.go's jetstream alone, as the adapter pulls: one
// Messages iterator pulling twice the workers ahead, feeding workers
// goroutines that decode each message and DoubleAck it (the ack the adapter
// sends).
//
// Its pulls expire after 5 seconds, as the adapter's do. The server can
// drop a pull it holds, and then it sends no more heartbeats. The iterator
// then pulls again rather than failing: the adapter recovers the same way,
// when its pull expires.
func (s *jsSource) consumeRaw(ctx context.Context, workers int, done func()) error {
	cons, err := s.k.js.Consumer(ctx, s.top.Stream, s.top.Consumer)
	if err != nil {
		return err
	}
	it, err := cons.Messages(
		jetstream.PullMaxMessages(2*workers),
		jetstream.PullExpiry(5*time.Second),
		jetstream.WithMessagesErrOnMissingHeartbeat(false),
	)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		once  sync.Once
		first error
	)
	fail := func(err error) { once.Do(func() { first = err; cancel() }) }
	work := make(chan jetstream.Msg)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for msg := range work {
				var d ledger.Deposit
				if err := json.Unmarshal(msg.Data(), &d); err != nil || d.MessageID == "" {
					fail(fmt.Errorf("undecodable message %q: %v", msg.Data(), err))
					continue
				}
				if err := msg.DoubleAck(ctx); err != nil {
					if ctx.Err() == nil {
						fail(err)
					}
					continue
				}
				done()
			}
		})
	}
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			fail(err)
			break
		}
		select {
		case work <- msg:
		case <-ctx.Done():
		}
	}
	it.Stop()
	close(work)
	wg.Wait()
	return first
}

func (s *jsSource) settled(ctx context.Context) error {
	cons, err := s.k.js.Consumer(ctx, s.top.Stream, s.top.Consumer)
	if err != nil {
		return err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return err
	}
	if info.NumAckPending != 0 || info.NumPending != 0 || info.AckFloor.Stream != uint64(s.n) {
		return fmt.Errorf("consumer %s: %d pending, %d awaiting an ack, ack floor %d of %d", s.top.Consumer, info.NumPending, info.NumAckPending, info.AckFloor.Stream, s.n)
	}
	return nil
}

func (s *jsSource) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = s.k.js.DeleteStream(ctx, s.top.Stream)
	_ = s.k.js.DeleteStream(ctx, s.top.DeadLetterStreamName())
}

// jsSink is a file-storage stream on one subject that both publishers
// publish every message to.
type jsSink struct {
	k       *jsKind
	stream  string
	subject string
}

func (k *jsKind) sink(ctx context.Context, tag string, _ int) (sink, error) {
	s := &jsSink{k: k, stream: tag, subject: tag + ".out"}
	if _, err := k.js.CreateStream(ctx, jetstream.StreamConfig{Name: tag, Subjects: []string{s.subject}, Storage: jetstream.FileStorage}); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *jsSink) publisher() (idem.Publisher, func()) {
	p := idemjs.NewPublisher(s.k.nc, consumer.WithLogger(quietLog), idemjs.WithMsg(func(_ idem.OutgoingMessage, msg *nats.Msg) { msg.Subject = s.subject }))
	return p, func() {}
}

func (s *jsSink) rawPublish(ctx context.Context, msgs []idem.OutgoingMessage, batch int) error {
	return s.k.publishAsync(ctx, s.subject, msgs, batch)
}

func (s *jsSink) count(ctx context.Context) (int, error) {
	st, err := s.k.js.Stream(ctx, s.stream)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	if info.State.Msgs > 1<<31 {
		return 0, errors.New("implausible stream size")
	}
	return int(info.State.Msgs), nil
}

func (s *jsSink) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = s.k.js.DeleteStream(ctx, s.stream)
}
