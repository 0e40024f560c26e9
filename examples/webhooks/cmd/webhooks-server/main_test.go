package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/idemtest/brokertest"
	"github.com/idemgen/idemgen/idem/rabbitmq"
)

func TestMain(m *testing.M) { os.Exit(brokertest.Main(m)) }

// docsMarker precedes, in docs/http.md, the shell session against this
// server and the block of what it prints.
const docsMarker = "<!-- webhooks-server session: TestDocsSession runs it against the server and compares the output -->\n"

// docsSession returns the session's script and its output, as docs/http.md
// shows them.
func docsSession(t *testing.T) (script, output string) {
	t.Helper()
	page, err := os.ReadFile("../../../../docs/http.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(page), docsMarker)
	if !ok {
		t.Fatalf("docs/http.md has no line %q", strings.TrimSpace(docsMarker))
	}
	block := func(s, open string) (string, string) {
		_, s, ok := strings.Cut(s, open)
		if !ok {
			t.Fatalf("docs/http.md: no %q block after the session's marker", open)
		}
		body, rest, ok := strings.Cut(s, "\n```\n")
		if !ok {
			t.Fatal("docs/http.md: a block of the session is not closed")
		}
		return body + "\n", rest
	}
	script, rest := block(after, "```sh\n")
	output, _ = block(rest, "```\n")
	return script, output
}

// serverOutput is run's output: it hands over the server's address once
// run prints it.
type serverOutput struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	addr chan string
}

func (o *serverOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf.Write(p)
	if line, _, ok := strings.Cut(o.buf.String(), "\n"); ok && o.addr != nil {
		addr, _, _ := strings.Cut(strings.TrimPrefix(line, "serving http://"), " ")
		o.addr <- addr
		o.addr = nil
	}
	return len(p), nil
}

// startRun runs the server from a fresh schema until the test ends, and
// returns its address and the schema.
func startRun(t *testing.T, amqpURL, queue string) (addr, schema string) {
	t.Helper()
	dbURL := idemtest.DatabaseURL(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema = "webhooks_server_test_" + hex.EncodeToString(b)
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan string, 1)
	out := &serverOutput{addr: started}
	done := make(chan error, 1)
	go func() { done <- run(ctx, dbURL, schema, "127.0.0.1:0", amqpURL, queue, out) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the server: %v", err)
		}
		if schemaExists(t, dbURL, schema) {
			t.Errorf("the server left its schema %s behind", schema)
		}
	})
	select {
	case addr = <-started:
	case err := <-done:
		t.Fatalf("the server ended before it served: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the server did not start within a minute")
	}
	return addr, schema
}

func schemaExists(t *testing.T, dbURL, schema string) bool {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	return exists
}

// TestDocsSession runs the curl session of docs/http.md against the server
// and compares what it prints with what the page shows.
func TestDocsSession(t *testing.T) {
	for _, tool := range []string{"bash", "curl", "openssl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the session of docs/http.md needs %s: %v", tool, err)
		}
	}
	script, want := docsSession(t)
	addr, _ := startRun(t, "", "")
	const docsURL = "API=http://127.0.0.1:8080\n"
	if !strings.Contains(script, docsURL) {
		t.Fatalf("the session of docs/http.md does not set %q", strings.TrimSpace(docsURL))
	}
	script = strings.Replace(script, docsURL, "API=http://"+addr+"\n", 1)
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	got, err := cmd.Output()
	if err != nil {
		t.Fatalf("the session: %v\n%s", err, stderr.String())
	}
	if string(got) != want {
		t.Errorf("the session of docs/http.md printed\n%s\nwhere the page shows\n%s", got, want)
	}
}

// TestServerConsumesQueue runs the server with -amqp: an event published
// to the queue is booked, and the same event sent to the webhook replays
// the queue's result.
func TestServerConsumesQueue(t *testing.T) {
	url := brokertest.RabbitMQURL(t)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	queue := "webhooks-server-test-" + hex.EncodeToString(b)
	t.Cleanup(func() { deleteTopology(t, url, rabbitmq.Topology{Queue: queue}) })
	addr, schema := startRun(t, url, queue)

	event := fmt.Sprintf(`{"id":"evt_q","object":"event","api_version":%q,"type":"payment_intent.succeeded","data":{"object":{"id":"pi_q","amount":300}}}`, stripe.APIVersion)
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirm, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, true, false, amqp.Publishing{ContentType: "application/json", Body: []byte(event)})
	if err != nil {
		t.Fatal(err)
	}
	if !confirm.Wait() {
		t.Fatalf("the broker did not confirm the event published to %s", queue)
	}

	db, err := pgx.Connect(context.Background(), idemtest.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	booked := func() bool {
		var n int
		err := db.QueryRow(context.Background(), fmt.Sprintf(`SELECT count(*) FROM %s.payments WHERE event = 'evt_q'`, pgx.Identifier{schema}.Sanitize())).Scan(&n)
		return err == nil && n == 1
	}
	brokertest.WaitFor(t, 30*time.Second, "the queue's event booked", booked)

	sig := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(event), Secret: demoSecret}).Header
	req, _ := http.NewRequest("POST", "http://"+addr+"/webhooks/stripe", strings.NewReader(event))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", sig)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the webhook's copy of the queue's event: %d, replayed %q; want 200 replayed", res.StatusCode, res.Header.Get("Idempotent-Replayed"))
	}
}

// deleteTopology deletes the queues and the exchange of top.
func deleteTopology(t *testing.T, url string, top rabbitmq.Topology) {
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Errorf("delete the topology of %s: %v", top.Queue, err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Errorf("delete the topology of %s: %v", top.Queue, err)
		return
	}
	for _, q := range []string{top.Queue, top.RetryQueue(), top.DeadLetterQueue()} {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			t.Errorf("delete queue %s: %v", q, err)
		}
	}
	if err := ch.ExchangeDelete(top.DeadLetterExchange(), false, false); err != nil {
		t.Errorf("delete exchange %s: %v", top.DeadLetterExchange(), err)
	}
}
