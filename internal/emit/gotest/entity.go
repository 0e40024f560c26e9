package gotest

import (
	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/internal/emit/gocode"
)

// entityTest writes the test of a mode=entity handler: the scenarios of
// idemtest.EntitySuite.
func (e emitter) entityTest(f *jen.File) {
	h := e.H
	suite := []jen.Code{
		jen.Id("Migrations"), jen.Qual("os", "DirFS").Call(jen.Lit(e.migrationsDir())),
		jen.Id("Table"), jen.Lit(h.Entity.Table),
		jen.Id("New"), e.newFunc(),
		e.fixtureField(), e.fixture(),
	}
	if h.Vary != nil {
		suite = append(suite, jen.Id("Variant"), e.variant())
	}
	e.doc(f, "EntitySuite")
	f.Func().Id(e.N.Test).Params(jen.Id("t").Op("*").Qual("testing", "T")).Block(
		jen.Qual(gocode.IdemtestPkg, "EntitySuite").Types(e.recvType(), gocode.Type(h.Msg), e.resultType()).Values(fieldLines(suite)...).Dot("Run").Call(jen.Id("t")),
	)
}

// naturalTest writes the test of a mode=natural handler: the scenarios of
// idemtest.NaturalSuite. Without a fixture, Rekey gives the scenario of two
// messages its second one.
func (e emitter) naturalTest(f *jen.File) {
	h := e.H
	suite := []jen.Code{
		jen.Id("Migrations"), jen.Qual("os", "DirFS").Call(jen.Lit(e.migrationsDir())),
		jen.Id("New"), e.newFunc(),
		jen.Id("Fixture"), e.fixture(),
	}
	if rekey := e.rekey(); rekey != nil && h.Fixture == "" {
		suite = append(suite, jen.Id("Rekey"), rekey)
	}
	e.doc(f, "NaturalSuite")
	f.Func().Id(e.N.Test).Params(jen.Id("t").Op("*").Qual("testing", "T")).Block(
		jen.Qual(gocode.IdemtestPkg, "NaturalSuite").Types(e.recvType(), gocode.Type(h.Msg), e.resultType()).Values(fieldLines(suite)...).Dot("Run").Call(jen.Id("t")),
	)
}
