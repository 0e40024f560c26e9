// Package docs holds idemgen's user documentation: one Markdown page per
// feature, linked from the repository's README.md. The package has no code;
// its test checks that every relative link and anchor in README.md and in
// docs/*.md resolves, so that a moved section or a renamed file fails the
// build instead of leaving a dead link behind.
package docs
