package gotest

import (
	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/internal/emit/gocode"
)

// externalTest writes the test of a mode=external handler: the scenarios of
// idemtest.ExternalSuite.
func (e emitter) externalTest(f *jen.File) {
	h := e.H
	suite := []jen.Code{
		jen.Id("Migrations"), jen.Qual("os", "DirFS").Call(jen.Lit(e.migrationsDir())),
		jen.Id("Inbox"), jen.Lit(h.Table),
		jen.Id("Lease"), gocode.Duration(h.Lease),
		jen.Id("New"), e.newFunc(),
		e.fixtureField(), e.fixture(),
	}
	if h.Vary != nil {
		suite = append(suite, jen.Id("Variant"), e.variant())
	}
	e.doc(f, "ExternalSuite")
	f.Func().Id(e.N.Test).Params(jen.Id("t").Op("*").Qual("testing", "T")).Block(
		jen.Qual(gocode.IdemtestPkg, "ExternalSuite").Types(e.recvType(), gocode.Type(h.Msg), e.resultType()).Values(fieldLines(suite)...).Dot("Run").Call(jen.Id("t")),
	)
}
