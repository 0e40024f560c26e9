package migrate

// State is what the migrations of a chain leave behind, as a Kind records it
// in a migration and reads it back: model.Inbox for InboxKind. The planner
// only passes States between a Kind's methods; each Kind is given back the
// States it made.
type State any

// A Kind is one kind of migration chain: the tables of a consumer's inbox,
// or (later) a fixed chain of the runtime's own tables. It knows what its
// migrations contain and how they are named; the planner (Dir.Plan) does the
// rest for every kind alike: versions, chains, the checksum file, ownership,
// and the refusals.
type Kind interface {
	// Name is the kind's name in messages and idemgen.sum: "inbox".
	Name() string
	// Owned reports whether each chain of the kind is a consumer's, named
	// by the consumer and owned by one package: idemgen.sum then records
	// the package, a chain whose owner lost its handler is refused unless
	// retired, and another package cannot take the name. A chain of a kind
	// that is not owned is the folder's, whatever package wants it.
	Owned() bool
	// Read reports whether content is a migration of this kind (ok), and
	// then the name of its chain and the State the migration leaves
	// behind, or, when its header cannot be read, why (err).
	Read(content []byte) (chain string, state State, ok bool, err error)
	// Evolve returns the States a chain passes through from current, the
	// State its last migration records (nil for a chain with no migration
	// yet), to one that satisfies want: one migration each, none when
	// current already does. An error says why the chain cannot get there
	// without losing or reinterpreting what it recorded, and what to do
	// instead.
	Evolve(current, want State) ([]State, error)
	// Render renders the migration that takes a chain from prev (nil for
	// its first migration) to next, and the name of its file after the
	// version (FileName). An error says that no migration of the kind
	// makes that step.
	Render(prev, next State) (name string, content []byte, err error)
}

// ChainID names a chain of a migrations folder.
type ChainID struct {
	Kind string // Kind.Name
	Name string // the consumer, for an owned kind
}

// A ModeKind is an owned Kind that holds the chains of the handlers of one
// mode=. A consumer name is one chain whatever its kind: a consumer whose
// folder holds a chain of another ModeKind than the one its handler wants
// switched modes, which the planner refuses (its rows mean something else).
type ModeKind interface {
	Kind
	// Mode is the directive's mode= value: "tx".
	Mode() string
}
