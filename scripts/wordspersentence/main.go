// Command wordspersentence measures how long the sentences of Markdown prose
// are: the mean number of words a sentence, over all the files given.
//
//	go run ./scripts/wordspersentence README.md docs/*.md
//
// It prints the mean for all files together and the number of sentences,
// then one line a file. Code blocks, tables, headings and HTML comments are
// left out, and so are fragments of two words or fewer. The docs aim at 20.
package main

import (
	"fmt"
	"os"
	"regexp"
	"strings"
)

var (
	codeBlock = regexp.MustCompile("(?s)```.*?```")
	sentEnd   = regexp.MustCompile(`[.!?]\s+`)
)

// count returns the words and sentences of a Markdown text.
func count(text string) (words, sentences int) {
	text = codeBlock.ReplaceAllString(text, "")
	var prose []string
	for _, line := range strings.Split(text, "\n") {
		l := strings.TrimLeft(line, " \t")
		if strings.HasPrefix(l, "|") || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "<!--") || strings.HasPrefix(l, "-  ") {
			continue
		}
		prose = append(prose, line)
	}
	joined := strings.Join(prose, "\n")
	// Split after each sentence's end mark, keeping the mark with it.
	var parts []string
	last := 0
	for _, m := range sentEnd.FindAllStringIndex(joined, -1) {
		parts = append(parts, joined[last:m[0]+1])
		last = m[1]
	}
	parts = append(parts, joined[last:])
	for _, p := range parts {
		if n := len(strings.Fields(p)); n > 2 {
			words += n
			sentences++
		}
	}
	return words, sentences
}

func mean(words, sentences int) float64 {
	return float64(words) / float64(max(1, sentences))
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: go run ./scripts/wordspersentence FILE.md...")
		os.Exit(2)
	}
	var all strings.Builder
	var lines []string
	for _, path := range os.Args[1:] {
		b, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "wordspersentence:", err)
			os.Exit(1)
		}
		all.Write(b)
		all.WriteString("\n")
		w, s := count(string(b))
		lines = append(lines, fmt.Sprintf("%6.1f %5d  %s", mean(w, s), s, path))
	}
	w, s := count(all.String())
	fmt.Printf("%.1f %d\n", mean(w, s), s)
	if len(lines) > 1 {
		fmt.Println(strings.Join(lines, "\n"))
	}
}
