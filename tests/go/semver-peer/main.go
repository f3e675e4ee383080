// semver-peer answers version and constraint questions with
// github.com/Masterminds/semver/v3 (the version go.mod pins), as the
// reference for src/domain/version_constraint.rs
// (tests/hermetic/version_constraint_vs_go.rs runs it; scripts/build-semver-peer.sh
// builds it).
//
// Input on stdin, one question per line, fields separated by a tab:
//
//	C<TAB>constraint<TAB>version   does the version satisfy the constraint?
//	V<TAB>a<TAB>b                  how does version a compare with b?
//
// Inside a field a backslash escapes the bytes a line cannot hold:
// \t (tab), \n, \r, \f, \v and \\ (a backslash); any other byte is itself.
//
// Output on stdout, one line per input line, in order:
//
//	ok<TAB>true|false   both parsed; Constraints.Check's answer
//	badc                NewConstraint rejected the constraint
//	badv                NewVersion rejected a version
//	cmp<TAB>-1|0|1      both parsed; Version.Compare's answer
//	bad-input           the line is neither form
//
// The library's package settings stay at their defaults (CoerceNewVersion
// on, Constraints.IncludePrerelease off).
package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/Masterminds/semver/v3"
)

// unescape undoes the field escaping described above.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch s[i] {
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 'f':
			b.WriteByte('\f')
		case 'v':
			b.WriteByte('\v')
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// answer returns the output line (without its newline) for one input line.
func answer(line string) string {
	f := strings.Split(line, "\t")
	if len(f) != 3 {
		return "bad-input"
	}
	a, b := unescape(f[1]), unescape(f[2])
	switch f[0] {
	case "C":
		c, err := semver.NewConstraint(a)
		if err != nil {
			return "badc"
		}
		v, err := semver.NewVersion(b)
		if err != nil {
			return "badv"
		}
		return fmt.Sprintf("ok\t%t", c.Check(v))
	case "V":
		x, err := semver.NewVersion(a)
		if err != nil {
			return "badv"
		}
		y, err := semver.NewVersion(b)
		if err != nil {
			return "badv"
		}
		return fmt.Sprintf("cmp\t%d", x.Compare(y))
	}
	return "bad-input"
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<16), 1<<24)
	out := bufio.NewWriter(os.Stdout)
	for in.Scan() {
		fmt.Fprintln(out, answer(in.Text()))
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "semver-peer:", err)
		os.Exit(1)
	}
	if err := out.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "semver-peer:", err)
		os.Exit(1)
	}
}
