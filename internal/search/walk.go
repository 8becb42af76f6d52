package search

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/toolpath"
)

// task is a directory to list or a regular file to examine, found in the
// directory parent (nil for the root), where it is opened by name: the walk
// never resolves a path afresh, so a directory swapped for a symlink
// meanwhile cannot lead it elsewhere.
type task struct {
	path    string
	nameOff int // the base name is path[nameOff:]
	dir     bool
	parent  *dirRef
}

// dirRef is an open directory shared by the tasks found in it; the last
// one to finish closes it.
type dirRef struct {
	fd   int
	refs atomic.Int32
}

func (d *dirRef) release() {
	if d != nil && d.refs.Add(-1) == 0 {
		syscall.Close(d.fd)
	}
}

// pool is a LIFO work stack shared by the workers. Children are pushed in
// reverse byte order, so a single worker walks depth-first in output order
// and several workers stay close to it, which makes pruning effective.
type pool struct {
	mu      sync.Mutex
	cond    sync.Cond
	stack   []task
	active  int  // tasks popped and not yet finished
	stopped bool // the context ended
}

func (p *pool) pop() (task, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.stack) == 0 && p.active > 0 && !p.stopped {
		p.cond.Wait()
	}
	if p.stopped || len(p.stack) == 0 {
		return task{}, false
	}
	t := p.stack[len(p.stack)-1]
	p.stack[len(p.stack)-1] = task{}
	p.stack = p.stack[:len(p.stack)-1]
	p.active++
	return t, true
}

// finish ends a popped task, pushing its children (given in byte order).
func (p *pool) finish(children []task) {
	p.mu.Lock()
	for i := len(children) - 1; i >= 0; i-- {
		p.stack = append(p.stack, children[i])
	}
	p.active--
	switch {
	case p.active == 0 && len(p.stack) == 0:
		p.cond.Broadcast() // all done
	case len(children) == 1:
		p.cond.Signal()
	case len(children) > 1:
		p.cond.Broadcast()
	}
	p.mu.Unlock()
}

func (p *pool) stop() {
	p.mu.Lock()
	p.stopped = true
	p.cond.Broadcast()
	p.mu.Unlock()
}

type counters struct {
	files, dirs, binary, large, perm, other int64
}

func (c *counters) add(o *counters) {
	c.files += o.files
	c.dirs += o.dirs
	c.binary += o.binary
	c.large += o.large
	c.perm += o.perm
	c.other += o.other
}

func (c *counters) fail(err error) {
	if isPermission(err) {
		c.perm++
	} else {
		c.other++
	}
}

// walk searches the tree with s.workers workers and reports whether it
// stopped early because ctx ended.
func (s *searcher) walk(ctx context.Context, total *counters) (incomplete bool) {
	p := &pool{}
	p.cond.L = &p.mu
	p.stack = append(p.stack, task{path: s.root, nameOff: len(s.root), dir: true})
	stopAfter := context.AfterFunc(ctx, p.stop)
	defer stopAfter()
	// Tasks left when the walk stopped early hold their directories open.
	defer func() {
		for _, t := range p.stack {
			if t.parent == nil {
				syscall.Close(s.rootFD)
			}
			t.parent.release()
		}
	}()

	workers := make([]*worker, s.workers)
	var wg sync.WaitGroup
	for i := range workers {
		w := &worker{s: s, buf: make([]byte, s.bufSize)}
		workers[i] = w
		wg.Go(func() {
			for {
				t, ok := p.pop()
				if !ok {
					return
				}
				p.finish(w.do(t))
			}
		})
	}
	wg.Wait()
	incomplete = len(p.stack) > 0
	for _, w := range workers {
		total.add(&w.cnt)
		incomplete = incomplete || w.aborted
	}
	return incomplete
}

type worker struct {
	s        *searcher
	buf      []byte
	cnt      counters
	children []task
	local    []match // the current file's matches, in line order
	overflow bool    // the current file had more than maxResults matches
	skipLine bool    // the current line already matched
	aborted  bool    // a file was abandoned because the context ended
}

// do performs one task and returns the children to queue (aliasing the
// worker's scratch slice, consumed before the next call).
func (w *worker) do(t task) []task {
	defer t.parent.release()
	if t.dir {
		return w.dir(t)
	}
	w.file(t)
	return nil
}

func (w *worker) dir(t task) []task {
	s := w.s
	var fd int
	if t.parent == nil {
		fd = s.rootFD
	} else {
		if s.col.pruned(t.path) {
			return nil
		}
		var err error
		if fd, err = s.h.openDir(t.parent.fd, t.path[t.nameOff:], t.path); err != nil {
			w.cnt.fail(err)
			return nil
		}
		if s.own.IsOwn(fd) {
			syscall.Close(fd)
			return nil
		}
	}
	ents, err := toolpath.ReadDir(fd)
	w.cnt.dirs++
	if err != nil {
		// The entries read before the error are still searched.
		w.cnt.fail(err)
	}
	sortEntries(ents)

	prefix := t.path + "/"
	if strings.HasSuffix(t.path, "/") {
		prefix = t.path // the root "/"
	}
	w.children = w.children[:0]
	for _, e := range ents {
		typ := e.Type()
		isDir := typ.IsDir()
		if !isDir && !typ.IsRegular() {
			continue // symlinks are not followed; special files are not read
		}
		name := e.Name()
		if isDir && s.exclude != nil {
			if _, skip := s.exclude[name]; skip {
				continue
			}
		}
		if isDir && toolpath.IsPerProcess(fd, name) {
			continue // a process's directory under /proc
		}
		child := task{path: prefix + name, nameOff: len(prefix), dir: isDir}
		if s.col.pruned(child.path) {
			break // entries are sorted: every later one is pruned too
		}
		w.children = append(w.children, child)
	}
	if len(w.children) == 0 {
		syscall.Close(fd)
		return nil
	}
	ref := &dirRef{fd: fd}
	ref.refs.Store(int32(len(w.children)))
	for i := range w.children {
		w.children[i].parent = ref
	}
	return w.children
}

func rootOpenError(err error) error {
	var coded *errcode.Error
	switch {
	case errors.As(err, &coded):
		return err // a refusal: the agent's own directories, /proc
	case isPermission(err):
		return ErrRootPermission
	case errors.Is(err, syscall.ENOENT):
		return ErrRootNotFound
	case errors.Is(err, toolpath.ErrNotDirectory):
		return ErrRootNotDirectory
	default:
		return errcode.Wrap(errcode.Internal, err, "root cannot be listed")
	}
}

func (w *worker) file(t task) {
	s := w.s
	if s.col.pruned(t.path) {
		return
	}
	w.cnt.files++
	if s.name != "" && !strings.Contains(t.path[t.nameOff:], s.name) {
		return
	}
	if s.text == nil {
		w.local = append(w.local[:0], match{path: t.path})
		s.col.add(w.local, false)
		return
	}
	w.scan(t)
}
