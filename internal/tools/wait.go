package tools

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/limits"
)

// waitDescription is process.wait's tool description.
var waitDescription = fmt.Sprintf("Wait for managed jobs to end: returns when any (mode all: every) job of process_ids (1-%d) is terminal, or after timeout_ms (default %d, at most %d), with the terminal jobs' records as ended and the live ones' ids as pending. With a progress token, a progress notification arrives at least every %s while it waits. Cancelled with the request.",
	limits.WaitMaxJobs, limits.WaitTimeoutDefault.Milliseconds(), limits.WaitTimeoutMax.Milliseconds(), seconds(limits.WaitProgressMaxGap))

// wait runs process.wait, keeping a client that gave a progress token
// informed while it waits, so the client's request timeout does not fire.
func wait(ctx context.Context, svc *jobs.Service, c Call, in jobs.WaitRequest) (*jobs.WaitResult, error) {
	tok := c.Req.Params.GetProgressToken()
	if tok == nil || c.Req.Session == nil {
		return svc.Wait(ctx, c.Who, in)
	}
	// The notifications run beside the wait: a slow client delays its own
	// notifications, never the wait's end.
	nctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		waitProgress(nctx, c.Req.Session, tok)
	}()
	res, err := svc.Wait(ctx, c.Who, in)
	stop()
	// No notification may follow the result.
	wg.Wait()
	return res, err
}

// waitProgress sends a notification every limits.WaitProgressPeriod until
// ctx ends; its progress is the seconds waited so far.
func waitProgress(ctx context.Context, ss *mcp.ServerSession, tok any) {
	began := time.Now()
	t := time.NewTicker(limits.WaitProgressPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
			ProgressToken: tok,
			Progress:      time.Since(began).Seconds(),
			Message:       "waiting for the jobs to end",
		})
		if err != nil {
			return
		}
	}
}
