package cli

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/principal"
	"github.com/commandcore/commandcore/internal/textenc"
)

type jobsInputOptions struct {
	jobsOptions
	Ctx context.Context
	ID  string
	EOF bool
}

// inputSent is what `jobs input` reports.
type inputSent struct {
	ProcessID   string `json:"process_id"`
	SentBytes   int64  `json:"sent_bytes"`
	InputClosed bool   `json:"input_closed"`
}

func newJobsInputCmd(o *jobsOptions) *cobra.Command {
	var eof bool
	cmd := &cobra.Command{
		Use:   "input ID",
		Short: "Send this command's stdin to a job's stdin or terminal (--eof: then close it)",
		Long: fmt.Sprintf(`Read this command's stdin to its end and deliver it, in order, to the
stdin (or terminal) of a job started with stdin or pty, in calls of at most
%d bytes; a job that is slow to read is waited for. With --eof the job's
stdin is closed afterwards (on a terminal: end-of-file).`, limits.MaxInputBytes),
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runJobsInput(&jobsInputOptions{jobsOptions: *o, Ctx: cmd.Context(), ID: args[0], EOF: eof})
		},
	}
	cmd.Flags().BoolVar(&eof, "eof", false, "close the job's stdin after the input")
	return cmd
}

func runJobsInput(o *jobsInputOptions) error {
	return o.withJobs(func(svc *jobs.Service) error {
		id, err := svc.ResolveID(o.ID)
		if err != nil {
			return err
		}
		o.ID = id
		sent := inputSent{ProcessID: id}
		buf := make([]byte, limits.MaxInputBytes)
		// An empty write first: a job that cannot take input is reported
		// before stdin is read, even when there is none.
		if err := sendAll(o.Ctx, svc, o.ID, nil, &sent); err != nil {
			return err
		}
		for {
			n, rerr := io.ReadFull(o.IO.In, buf)
			if n > 0 {
				if err := sendAll(o.Ctx, svc, o.ID, buf[:n], &sent); err != nil {
					return err
				}
			}
			if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
				break
			}
			if rerr != nil {
				return fmt.Errorf("read stdin: %w", rerr)
			}
		}
		if o.EOF {
			res, err := svc.Input(o.Ctx, principal.Local, jobs.InputRequest{ProcessID: o.ID, EOF: true})
			if err != nil {
				return err
			}
			sent.InputClosed = res.InputClosed
		}
		if o.JSON {
			return writeJSON(o.IO.Out, sent)
		}
		closed := ""
		if sent.InputClosed {
			closed = "; its stdin is closed"
		}
		_, err = fmt.Fprintf(o.IO.Out, "%d bytes sent to %s%s\n", sent.SentBytes, o.ID, closed)
		return err
	})
}

// sendAll delivers chunk whole: a job that took part of it within the
// input write timeout is sent the rest. An empty chunk is one empty write.
func sendAll(ctx context.Context, svc *jobs.Service, id string, chunk []byte, sent *inputSent) error {
	for first := true; first || len(chunk) > 0; first = false {
		if err := ctx.Err(); err != nil {
			return err
		}
		res, err := svc.Input(ctx, principal.Local, jobs.InputRequest{
			ProcessID: id, Data: base64.StdEncoding.EncodeToString(chunk), Encoding: textenc.Base64,
		})
		if err != nil {
			return err
		}
		chunk = chunk[res.AcceptedBytes:]
		sent.SentBytes += int64(res.AcceptedBytes)
	}
	return nil
}
