package app

// Directives in test files are not read by idemgen, nor by the analyzer
// (idemgen's loader warns about them; the analyzer sees the test package).
