package main

import "testing"

func TestCount(t *testing.T) {
	text := "# A heading is left out\n\nOne short sentence here. And a second one, a little longer!\n\n" +
		"```go\nfmt.Println(\"code is left out. Entirely so.\")\n```\n\n| a table row | is left out too |\n\nOk then.\n"
	w, s := count(text)
	if w != 11 || s != 2 {
		t.Errorf("count = %d words, %d sentences; want 11 and 2 (the fragment 'Ok then.' is too short)", w, s)
	}
}
