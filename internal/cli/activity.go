package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os/signal"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/activity"
	"github.com/commandcore/commandcore/internal/statedir"
)

// activityTail is how many entries a follow starts with, like tail -f.
const activityTail = 10

// activityPoll is how often a follow looks for new entries.
const activityPoll = 250 * time.Millisecond

// activityBatch bounds one read while following.
const activityBatch = 500

type activityOptions struct {
	IO IO
	// Ctx ends a follow.
	Ctx      context.Context
	StateDir string
	// Once prints the Last entries and returns; otherwise the command
	// prints the last few and follows.
	Once       bool
	Last       int
	ErrorsOnly bool
	JSON       bool
}

func newActivityCmd(g *globalFlags, streams IO) *cobra.Command {
	o := &activityOptions{IO: streams}
	cmd := &cobra.Command{
		Use:   "activity",
		Short: "Show the content-free activity journal (follows unless --last is given)",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Once = cmd.Flags().Changed("last")
			if o.Once && o.Last < 0 {
				return usageError("--last must not be negative")
			}
			dirs, err := g.agentDirs(streams)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), unix.SIGINT, unix.SIGTERM)
			defer stop()
			o.Ctx, o.StateDir = ctx, dirs.State
			return runActivity(o)
		},
	}
	cmd.Flags().IntVar(&o.Last, "last", 0, "print the last N entries and exit")
	cmd.Flags().BoolVar(&o.ErrorsOnly, "errors", false, "only failure and recovery entries")
	cmd.Flags().BoolVar(&o.JSON, "json", false, "one JSON object per line")
	return cmd
}

func runActivity(o *activityOptions) error {
	if err := statedir.Existing(o.StateDir); err != nil {
		return err
	}
	path := statedir.JournalPath(o.StateDir)
	r, err := activity.OpenReader(path)
	for errors.Is(err, fs.ErrNotExist) && !o.Once {
		// Following a journal that does not exist yet waits for it.
		select {
		case <-o.Ctx.Done():
			return nil
		case <-time.After(activityPoll):
		}
		r, err = activity.OpenReader(path)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open activity journal: %w", err)
	}
	defer r.Close()
	n := o.Last
	if !o.Once {
		n = activityTail
	}
	events, err := r.Last(n, o.ErrorsOnly)
	if err != nil {
		return fmt.Errorf("read activity journal: %w", err)
	}
	var after int64
	for _, e := range events {
		if err := printEvent(o, e); err != nil {
			return err
		}
		after = e.ID
	}
	if o.Once {
		return nil
	}
	if len(events) == 0 {
		if after, err = r.Cursor(); err != nil {
			return fmt.Errorf("read activity journal: %w", err)
		}
	}
	return followActivity(o, r, after)
}

// followActivity prints entries after the one with ID after as they
// arrive, until o.Ctx ends.
func followActivity(o *activityOptions, r *activity.Reader, after int64) error {
	for {
		select {
		case <-o.Ctx.Done():
			return nil
		case <-time.After(activityPoll):
		}
		events, err := r.Since(after, o.ErrorsOnly, activityBatch)
		if err != nil {
			return fmt.Errorf("follow activity journal: %w", err)
		}
		for _, e := range events {
			if err := printEvent(o, e); err != nil {
				return err
			}
			after = e.ID
		}
	}
}

func printEvent(o *activityOptions, e activity.Event) error {
	if o.JSON {
		return writeJSONLines(o.IO.Out, e)
	}
	_, err := fmt.Fprintln(o.IO.Out, activity.Format(e))
	return err
}
