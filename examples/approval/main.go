// Approval shows human interaction: an orchestration asks for an approval,
// waits for it as an external event, and races that wait against a
// durable timer. The program plays the approver for one expense and stays
// silent for the other, so both outcomes show: approved, and escalated
// after the timeout. The wait costs nothing while it lasts: no goroutine
// or lock is held, and it survives restarts.
//
//	go run ./examples/approval
//
// It runs on an embedded Cosmos DB emulator (cosmosemu), so it needs
// nothing but Go. Set COSMOS_ENDPOINT to run on Azure Cosmos DB instead:
// with COSMOS_KEY for key auth, otherwise with Entra ID through
// DefaultAzureCredential (the database and container, COSMOS_DATABASE and
// COSMOS_CONTAINER, default "durafeed", must then exist).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/google/uuid"

	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/provider"
	"github.com/durafeed/durafeed/runtime"
	"github.com/durafeed/durafeed/store"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "approval:", err)
		os.Exit(1)
	}
}

// expense is the orchestration's input; decision the approver's event.
type expense struct {
	ID      string        `json:"id"`
	Amount  int           `json:"amount"`
	Timeout time.Duration `json:"timeout"`
}

type decision struct {
	Approved bool   `json:"approved"`
	By       string `json:"by"`
}

const (
	decisionEvent = "ApprovalDecision"
	waiting       = "waiting for approval"
)

func registerCode(reg *runtime.Registry) {
	runtime.RegisterActivity(reg, "NotifyApprover", func(_ context.Context, e expense) (string, error) {
		return "mail sent for " + e.ID, nil // a real one would send a mail or a chat message
	})
	runtime.RegisterActivity(reg, "Reimburse", func(_ context.Context, e expense) (string, error) {
		return fmt.Sprintf("reimbursed %d EUR", e.Amount), nil
	})
	runtime.RegisterActivity(reg, "Escalate", func(_ context.Context, e expense) (string, error) {
		return "escalated to finance", nil
	})
	runtime.RegisterOrchestration(reg, "ExpenseApproval", func(ctx *runtime.OrchestrationContext, e expense) (string, error) {
		if _, err := ctx.CallActivity("NotifyApprover", e).AwaitRaw(); err != nil {
			return "", err
		}
		// Committed with the event subscription: once a client sees this
		// status, an event it raises is delivered to the wait below.
		ctx.SetCustomStatus(waiting)
		answer := ctx.WaitForEvent(decisionEvent)
		timeout := ctx.CreateTimer(e.Timeout)
		winner, err := ctx.Select(answer, timeout) // the loser is cancelled
		if err != nil {
			return "", err
		}
		if winner == 1 {
			ctx.SetCustomStatus("escalated")
			done, err := runtime.AwaitAs[string](ctx.CallActivity("Escalate", e))
			return fmt.Sprintf("no decision within %s, %s", e.Timeout, done), err
		}
		d, err := runtime.AwaitAs[decision](answer)
		if err != nil {
			return "", err
		}
		if !d.Approved {
			ctx.SetCustomStatus("rejected")
			return "rejected by " + d.By, nil
		}
		ctx.SetCustomStatus("approved")
		done, err := runtime.AwaitAs[string](ctx.CallActivity("Reimburse", e))
		return "approved by " + d.By + ", " + done, err
	})
}

func run(ctx context.Context, out io.Writer) error {
	p, closeStore, err := openProvider(ctx)
	if err != nil {
		return err
	}
	defer closeStore()

	reg := runtime.NewRegistry()
	registerCode(reg)
	rt := runtime.New(p, reg, runtime.Options{IdleBackoff: 20 * time.Millisecond})
	if err := rt.Start(); err != nil {
		return err
	}
	defer shutdown(rt)
	client := rt.Client()

	suffix := uuid.NewString()
	answered := expense{ID: "expense-1-" + suffix, Amount: 120, Timeout: time.Minute}
	ignored := expense{ID: "expense-2-" + suffix, Amount: 80, Timeout: time.Second}
	for _, e := range []expense{answered, ignored} {
		if err := client.StartOrchestration(ctx, e.ID, "ExpenseApproval", e); err != nil {
			return err
		}
	}

	// Play the approver of the first expense: wait until it listens, then
	// answer. Nobody answers the second one.
	if err := waitForStatus(ctx, client, answered.ID, waiting); err != nil {
		return err
	}
	if err := client.RaiseEvent(ctx, answered.ID, decisionEvent, decision{Approved: true, By: "manager"}); err != nil {
		return err
	}

	for _, e := range []expense{answered, ignored} {
		status, err := client.WaitForOrchestration(ctx, e.ID)
		if err != nil {
			return err
		}
		if status.State != runtime.StateCompleted {
			return fmt.Errorf("%s ended %s: %v", e.ID, status.State, status.Failure)
		}
		var outcome string
		if err := status.DecodeOutput(&outcome); err != nil {
			return err
		}
		fmt.Fprintf(out, "expense of %d EUR: %s\n", e.Amount, outcome)
	}
	return nil
}

// waitForStatus waits until the instance's custom status is want.
func waitForStatus(ctx context.Context, client *runtime.Client, id, want string) error {
	var seen uint64
	for {
		cs, err := client.WaitForCustomStatus(ctx, id, seen)
		if err != nil {
			return err
		}
		if cs.Status != nil && *cs.Status == want {
			return nil
		}
		seen = cs.Version
	}
}

// shutdown stops the runtime, letting in-flight work finish for a while.
func shutdown(rt *runtime.Runtime) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = rt.Shutdown(ctx)
}

// openProvider connects to Azure Cosmos DB when COSMOS_ENDPOINT is set and
// to an embedded emulator otherwise; closeStore releases what it opened.
func openProvider(ctx context.Context) (p *provider.Provider, closeStore func(), err error) {
	if os.Getenv("COSMOS_ENDPOINT") != "" {
		cfg, err := provider.ConfigFromEnv()
		if err != nil {
			return nil, nil, err
		}
		p, err := provider.New(ctx, cfg)
		if err != nil {
			return nil, nil, err
		}
		return p, func() { _ = p.Close() }, nil
	}
	emu, err := cosmosemu.Start(ctx, cosmosemu.Options{})
	if err != nil {
		return nil, nil, err
	}
	p, err = provider.New(ctx, provider.Config{Store: store.Options{Endpoint: emu.Endpoint(), Key: emu.Key(), ClientOptions: emu.ClientOptions()}})
	if err != nil {
		_ = emu.Close()
		return nil, nil, err
	}
	return p, func() { _ = p.Close(); _ = emu.Close() }, nil
}
