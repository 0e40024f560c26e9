package idemimpl

// SupportPackageIsVersion4 names the contract between the idem runtime and
// the code idemgen generates for it: the names, signatures and meaning of what
// a generated wrapper calls, embeds and declares ([Table] and [Column], from
// which the runtime builds the inbox's statements, [NewInbox],
// [NewPublishingInbox], [NewSetInbox], [NewPublishingSetInbox], [Inbox] and
// its methods (Check among them), [NoResult], [NoResultPublishing],
// [NoResultSet], [NoResultPublishingSet], [InvalidKey], [CheckString],
// [CheckUUID], [CheckInt];
// for mode=external [ExternalTable], [NewExternalInbox], [ExternalInbox] and
// its methods, [NoResultExternal]; for mode=entity [EntityTable],
// [NewEntityInbox], [NewPublishingEntityInbox], [EntityInbox],
// [FingerprintColumn], [FingerprintSetting], [MarkerCheckMessage]; for
// mode=natural [NaturalTable], [NewNaturalInbox], [NaturalInbox]; and of
// package idem the types they use, idem.DB, idem.Option, idem.None,
// idem.Outcome, idem.Handler, idem.BatchHandler, idem.Maintained) and of what
// the generated tests call in idem/idemtest.
//
// Every generated idem_gen.go references it in a line of its own,
//
//	const _ = idemimpl.SupportPackageIsVersion4
//
// as generated gRPC code references grpc.SupportPackageIsVersionN: code
// generated for another contract than the one of the runtime it is built with
// fails to compile on that line, with a comment above it that says to
// regenerate with the idemgen of the same module version as the runtime (go
// run github.com/idemgen/idemgen/cmd/idemgen, which builds the version go.mod
// requires), rather than compiling and misbehaving.
//
// It is bumped, to SupportPackageIsVersion4 and so on, with the old name
// removed, whenever a change to this package, to what generated code uses of
// package idem, or to idemtest would make code generated before it wrong or
// fail to compile: a field of a table declaration added or whose meaning
// changes, a function generated code calls that changes its signature or goes
// away. Changes that code generated before still works with (a new option, a
// fix inside the protocol) keep the version. idemgen emits the name of the
// version it generates for, and its golden tests compile what it emits
// against this package.
//
// Version 2: the generated declarations hold no SQL (the runtime builds the
// statements from the table's name and key columns), and the wrappers embed
// the runtime's inbox instead of forwarding to it.
//
// Version 3: what only generated code calls moved from package idem to this
// package (idem.SupportPackageIsVersion2 is gone with it), so that package
// idem documents what users call. Added later within version 3, since code
// generated before neither sets nor calls them and means what it meant:
// Table.Partition, the Bucket constants (Hour, Day, Week, Month) and
// idemtest.Partition (an inbox partitioned by time); Table.Handler (a
// set-based handler's name in errors); NewSetInbox, NewPublishingSetInbox,
// NoResultSet and NoResultPublishingSet (set-based batch handlers). Such code
// needs no regeneration; code that uses them fails to compile, on the name,
// against a runtime without them.
//
// Version 4: the table declarations name the migrations that create what
// the consumer needs (Table.Migration and Table.OutboxMigration,
// ExternalTable.Migration, EntityTable.Migration and
// EntityTable.OutboxMigration), which the wrappers' Check names when it
// finds a table, key column or unique constraint missing; the generated
// doc comments leave what every wrapper does to this package and
// docs/generated.md.
const SupportPackageIsVersion4 = true
