package cli

import (
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
	last       int
	errorsOnly bool
	asJSON     bool
}

func newActivityCmd(g *globalFlags, streams IO) *cobra.Command {
	o := &activityOptions{}
	cmd := &cobra.Command{
		Use:   "activity",
		Short: "Show the content-free activity journal (follows unless --last is given)",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("last") && o.last < 0 {
				return usageError("--last must not be negative")
			}
			return runActivity(cmd, g, o, streams, cmd.Flags().Changed("last"))
		},
	}
	cmd.Flags().IntVar(&o.last, "last", 0, "print the last N entries and exit")
	cmd.Flags().BoolVar(&o.errorsOnly, "errors", false, "only failure and recovery entries")
	cmd.Flags().BoolVar(&o.asJSON, "json", false, "one JSON object per line")
	return cmd
}

func runActivity(cmd *cobra.Command, g *globalFlags, o *activityOptions, streams IO, once bool) error {
	dirs, err := g.dirs()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), unix.SIGINT, unix.SIGTERM)
	defer stop()
	path := statedir.JournalPath(dirs.State)
	r, err := activity.OpenReader(path)
	for errors.Is(err, fs.ErrNotExist) && !once {
		// Following a journal that does not exist yet waits for it.
		select {
		case <-ctx.Done():
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
	n := o.last
	if !once {
		n = activityTail
	}
	events, err := r.Last(n, o.errorsOnly)
	if err != nil {
		return fmt.Errorf("read activity journal: %w", err)
	}
	var after int64
	for _, e := range events {
		if err := printEvent(streams, o, e); err != nil {
			return err
		}
		after = e.ID
	}
	if once {
		return nil
	}
	if len(events) == 0 {
		if after, err = r.Cursor(); err != nil {
			return fmt.Errorf("read activity journal: %w", err)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(activityPoll):
		}
		events, err := r.Since(after, o.errorsOnly, activityBatch)
		if err != nil {
			return fmt.Errorf("follow activity journal: %w", err)
		}
		for _, e := range events {
			if err := printEvent(streams, o, e); err != nil {
				return err
			}
			after = e.ID
		}
	}
}

func printEvent(streams IO, o *activityOptions, e activity.Event) error {
	if o.asJSON {
		return writeJSONLines(streams.Out, e)
	}
	_, err := fmt.Fprintln(streams.Out, activity.Format(e))
	return err
}
