package migrate

import (
	"bytes"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/idemgen/idemgen/migrations"
)

// OutboxChain is the name of the outbox chain in a migrations folder and in
// its checksum file (chain=outbox/idem_outbox).
const OutboxChain = "idem_outbox"

// OutboxKind is the kind of the outbox chain: the runtime's own migrations
// of idem_outbox (package migrations, hand-written), copied byte for byte
// into the migrations folder of every handler that takes an *idem.Outbox, so
// that a deploy pipeline runs one goose folder. Its State is how many of the
// runtime's migrations the folder holds (OutboxSteps): a runtime that gained
// a migration adds it as the folder's next version, never as an edit of a
// copy. The chain is the folder's, not a package's (Owned is false): a
// folder whose handlers stop publishing keeps it as it is.
//
// A copy is told by the migrations.Marker line above its goose annotations.
// idemgen writes it byte for byte. A copy is one of the runtime's
// migrations when its SQL is, comment lines aside: a runtime whose comments
// were rewritten still knows the copies an older idemgen wrote. Any other
// content with the marker is an edited copy, which the planner refuses like
// an edited inbox migration. The folder's idemgen.sum still catches any edit
// of a recorded copy, comments included.
type OutboxKind struct {
	steps []outboxStep
}

// OutboxSteps is the State of an outbox chain: the number of the runtime's
// migrations, in order, that the folder holds.
type OutboxSteps int

// outboxEdited is the State of a copy that is none of the runtime's
// migrations.
type outboxEdited struct{}

// outboxStep is one of the runtime's migrations.
type outboxStep struct {
	name    string // the file's name without its version and .sql: idem_outbox
	content []byte
	sql     string // content without its comment lines (sqlOf)
}

// NewOutboxKind returns the kind of the outbox chain whose migrations are
// the .sql files at the root of src (migrations.FS; another FS in tests, to
// play a runtime that gained a migration), in goose's NNNNN_name.sql form,
// each carrying the marker line before "-- +goose Up". An error says which
// file is not such a migration.
func NewOutboxKind(src fs.FS) (OutboxKind, error) {
	names, err := fs.Glob(src, "*.sql")
	if err != nil {
		return OutboxKind{}, err
	}
	if len(names) == 0 {
		return OutboxKind{}, fmt.Errorf("the runtime's outbox migrations: no .sql file")
	}
	slices.Sort(names)
	var k OutboxKind
	for _, name := range names {
		content, err := fs.ReadFile(src, name)
		if err != nil {
			return OutboxKind{}, fmt.Errorf("the runtime's outbox migration %s: %w", name, err)
		}
		base := strings.TrimSuffix(path.Base(name), ".sql")
		_, rest, _ := strings.Cut(base, "_")
		switch {
		case Version(name) == 0 || rest == "":
			return OutboxKind{}, fmt.Errorf("the runtime's outbox migration %s is not named NNNNN_name.sql", name)
		case !isOutbox(content):
			return OutboxKind{}, fmt.Errorf("the runtime's outbox migration %s has no %q line before -- +goose Up", name, migrations.Marker)
		}
		k.steps = append(k.steps, outboxStep{name: rest, content: content, sql: sqlOf(content)})
	}
	return k, nil
}

// Steps is the State of a folder that holds all the runtime's migrations:
// the one a handler that takes an *idem.Outbox wants.
func (k OutboxKind) Steps() OutboxSteps { return OutboxSteps(len(k.steps)) }

// Name is "outbox".
func (OutboxKind) Name() string { return "outbox" }

// Owned is false: the outbox chain is the folder's, shared by every handler
// whose migrations go there.
func (OutboxKind) Owned() bool { return false }

// Read reports whether content is a migration of the outbox chain (it has
// the marker line), and which of the runtime's migrations it is.
func (k OutboxKind) Read(content []byte) (string, State, bool, error) {
	if !isOutbox(content) {
		return "", nil, false, nil
	}
	sql := sqlOf(content)
	for i, step := range k.steps {
		if bytes.Equal(step.content, content) || step.sql == sql {
			return OutboxChain, OutboxSteps(i + 1), true, nil
		}
	}
	return OutboxChain, outboxEdited{}, true, nil
}

// Evolve returns the runtime's migrations the folder lacks. A folder that
// holds more than this runtime knows was written by a newer idemgen, and is
// refused. After an edited copy nothing is planned: the edit is refused.
func (k OutboxKind) Evolve(current, want State) ([]State, error) {
	var have OutboxSteps
	switch c := current.(type) {
	case outboxEdited:
		return nil, nil
	case OutboxSteps:
		have = c
	}
	n := want.(OutboxSteps)
	if have > n {
		return nil, fmt.Errorf("the folder holds %d of the runtime's outbox migrations, and this idemgen's runtime has only %d: generate with the idemgen (and idem) version that wrote them, or a newer one", have, n)
	}
	var steps []State
	for s := have + 1; s <= n; s++ {
		steps = append(steps, s)
	}
	return steps, nil
}

// Render returns the runtime's migration next, which follows prev; for an
// edited copy (next), the one that should stand there.
func (k OutboxKind) Render(prev, next State) (string, []byte, error) {
	var after OutboxSteps // the step prev is; -1 when unknown
	switch p := prev.(type) {
	case nil:
	case OutboxSteps:
		after = p
	default:
		after = -1
	}
	n, ok := next.(OutboxSteps)
	switch {
	case !ok && after >= 0:
		n = after + 1
	case !ok:
		return "", nil, fmt.Errorf("it was edited, as was the outbox migration before it")
	case after >= 0 && n != after+1:
		return "", nil, fmt.Errorf("it is the runtime's outbox migration %d, but follows number %d", n, after)
	}
	if n < 1 || int(n) > len(k.steps) {
		return "", nil, fmt.Errorf("it was edited, or copied by a newer idemgen: this idemgen's runtime has %d outbox migration(s), and it would be number %d", len(k.steps), n)
	}
	step := k.steps[n-1]
	return step.name, step.content, nil
}

// isOutbox reports whether content carries the outbox marker line before its
// goose annotations.
func isOutbox(content []byte) bool {
	for _, line := range strings.Split(string(content), "\n") {
		line = strings.TrimSuffix(line, "\r")
		switch {
		case line == migrations.Marker:
			return true
		case strings.HasPrefix(line, "-- +goose"):
			return false
		}
	}
	return false
}
