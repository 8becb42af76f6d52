// Package cmdpipe hands a shell its command through a pipe instead of its
// arguments: /proc/<pid>/cmdline is readable by every local user, a pipe is
// not (README). Managed jobs and process.run start
// their shells this way.
//
// The shell runs a fixed script that sources the pipe, which holds one
// single-quoted assignment of the command to a shell variable. The variable
// is not exported, so no child's environment carries it; the script closes
// the descriptor, then evaluates the command after unsetting the variable,
// so the command sees neither. The argv of the shell and of its subshells
// is that fixed script; programs the command runs get only their own
// arguments. It works in any POSIX shell (bash, dash). One difference from
// `bash -c command`: bash no longer replaces itself with a lone last
// command, so the shell stays the command's parent, as dash always was.
package cmdpipe

import (
	"os"
	"strings"
)

// variable holds the command inside the shell for a moment.
const variable = "__commandcore_command"

// script sources the pipe, closes it and runs the command. The eval stays on
// the script's first line, so $LINENO and the shell's error messages
// ("bash: line 2: ...") count the command's own lines; ${var?} fails
// loudly if the assignment never arrived.
const script = `. /proc/self/fd/3 && exec 3<&- && eval "unset ` + variable + `; ${` + variable + `?}"`

// Argv is the shell's argument vector. $0 is the shell itself, as it was
// with `shell -c command`.
func Argv(shell string) []string { return []string{shell, "-c", script} }

// Pipe carries one command to one shell.
type Pipe struct {
	r, w *os.File
	// sent is closed when Send's write has ended; nil before Send.
	sent chan struct{}
}

// New creates the pipe. Pass Reader to the shell as its descriptor 3
// (os.ProcAttr.Files[3], exec.Cmd.ExtraFiles[0]), call
// Send once the shell has started (or Close if it did not), and Close once
// it has exited.
func New() (*Pipe, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	return &Pipe{r: r, w: w}, nil
}

// Reader is the pipe's read end, for the shell.
func (p *Pipe) Reader() *os.File { return p.r }

// Send drops our copy of the read end and writes command in the
// background: a command larger than a pipe buffer is written while the
// shell reads it. The command must not contain NUL bytes. A shell that ends
// before reading it all ends the write (EPIPE).
func (p *Pipe) Send(command string) {
	p.r.Close()
	data := variable + "='" + strings.ReplaceAll(command, "'", `'\''`) + "'\n"
	p.sent = make(chan struct{})
	go func() {
		defer close(p.sent)
		p.w.WriteString(data)
		p.w.Close()
	}()
}

// Close releases the pipe, ending a write still blocked on a reader that
// no longer reads, and waits for Send's writer to return.
func (p *Pipe) Close() {
	p.r.Close()
	p.w.Close()
	if p.sent != nil {
		<-p.sent
	}
}
