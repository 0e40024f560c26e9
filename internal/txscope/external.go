package txscope

import (
	"go/types"
	"slices"
	"strings"
)

// outsideCall is a family of calls whose effect is outside the database: a
// rollback does not undo it, and a redelivery does it again.
type outsideCall struct {
	pkg string
	// recv are the receiver types of the methods; none for functions.
	recv []string
	// names are the functions or methods; a trailing * matches a prefix.
	names []string
	// publish marks a broker's publish, whose fix is the outbox.
	publish bool
}

// outsideCalls are the calls external-call reports: HTTP clients, mail,
// processes, and the publishes of the brokers idemgen has adapters for and
// of a few other common clients.
var outsideCalls = []outsideCall{
	{pkg: "net/http", names: []string{"Get", "Head", "Post", "PostForm"}},
	{pkg: "net/http", recv: []string{"Client"}, names: []string{"Do", "Get", "Head", "Post", "PostForm"}},
	{pkg: "net/http", recv: []string{"Transport", "RoundTripper"}, names: []string{"RoundTrip"}},
	{pkg: "net/smtp", names: []string{"SendMail", "Dial"}},
	{pkg: "os/exec", names: []string{"Command", "CommandContext"}},
	{pkg: "os", names: []string{"StartProcess"}},
	{pkg: "syscall", names: []string{"Exec", "ForkExec", "StartProcess"}},
	{pkg: "github.com/rabbitmq/amqp091-go", recv: []string{"Channel"}, names: []string{"Publish*"}, publish: true},
	{pkg: "github.com/streadway/amqp", recv: []string{"Channel"}, names: []string{"Publish"}, publish: true},
	{pkg: "github.com/nats-io/nats.go", recv: []string{"Conn", "EncodedConn"}, names: []string{"Publish*", "Request*"}, publish: true},
	{pkg: "github.com/nats-io/nats.go", recv: []string{"JetStream", "JetStreamContext"}, names: []string{"Publish*"}, publish: true},
	{pkg: "github.com/nats-io/nats.go/jetstream", recv: []string{"Publisher", "JetStream"}, names: []string{"Publish*"}, publish: true},
	{pkg: "github.com/twmb/franz-go/pkg/kgo", recv: []string{"Client"}, names: []string{"Produce", "ProduceSync", "TryProduce"}, publish: true},
	{pkg: "github.com/segmentio/kafka-go", recv: []string{"Writer"}, names: []string{"WriteMessages"}, publish: true},
	{pkg: "github.com/confluentinc/confluent-kafka-go/v2/kafka", recv: []string{"Producer"}, names: []string{"Produce"}, publish: true},
	{pkg: "github.com/IBM/sarama", recv: []string{"SyncProducer"}, names: []string{"SendMessage", "SendMessages"}, publish: true},
	{pkg: "github.com/ThreeDotsLabs/watermill/message", recv: []string{"Publisher"}, names: []string{"Publish"}, publish: true},
	{pkg: "github.com/idemgen/idemgen/idem", recv: []string{"Publisher"}, names: []string{"Publish"}, publish: true},
	{pkg: "cloud.google.com/go/pubsub", recv: []string{"Topic"}, names: []string{"Publish"}, publish: true},
}

// outside reports whether a call of fn has an effect outside the database,
// and whether it is a broker's publish.
func outside(fn *types.Func) (match, publish bool) {
	if fn.Pkg() == nil {
		return false, false
	}
	path := fn.Pkg().Path()
	recv := ""
	if sig, ok := fn.Type().(*types.Signature); ok && sig.Recv() != nil {
		t := types.Unalias(sig.Recv().Type())
		if p, ok := t.(*types.Pointer); ok {
			t = types.Unalias(p.Elem())
		}
		if n, ok := t.(*types.Named); ok {
			recv = n.Obj().Name()
		} else {
			recv = "?"
		}
	}
	for _, c := range outsideCalls {
		if c.pkg != path || (recv == "") != (len(c.recv) == 0) || (recv != "" && !slices.Contains(c.recv, recv)) {
			continue
		}
		for _, name := range c.names {
			if name == fn.Name() || (strings.HasSuffix(name, "*") && strings.HasPrefix(fn.Name(), strings.TrimSuffix(name, "*"))) {
				return true, c.publish
			}
		}
	}
	return false, false
}
