// porch-runtime-client calls a function runner the way porch-server v1.5.3
// does, for a while, and reports every call.
//
// It dials like porch-server's gRPC function runtime (pkg/engine,
// newGRPCFunctionRuntime): one grpc.NewClient to the runner's address with
// insecure transport credentials and the same message-size call options,
// Porch's generated evaluator client (github.com/nephio-project/porch/func/
// evaluator), and one ClientConn shared by every call; grpc-go is the
// version Porch v1.5.3 requires. Like porch-server it leaves balancing to
// the address: pick_first, so one connection at a time.
//
// It only adds observation: the channel's connectivity states (each READY
// is a new connection) and, per call, when it started and ended, its
// outcome, and which replica answered (the first "served-by-NAME" in the
// answer, which the test's function writes).
//
// Usage (all flags optional but -address and -image):
//
//	porch-runtime-client -address 127.0.0.1:9445 -image IMG -input rl.yaml \
//	  -duration 8s -rate 40 -callers 4 [-slow-image IMG2 -slow-callers 1]
//
// Output: one JSON object on stdout at the end (see report); while it
// runs, one line per connectivity change on stderr.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"regexp"
	"sync"
	"time"

	pb "github.com/nephio-project/porch/func/evaluator"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

var (
	address     = flag.String("address", "localhost:9445", "function runner address (porch-server's --function-runner)")
	image       = flag.String("image", "", "function image of the regular calls")
	input       = flag.String("input", "", "file holding the ResourceList sent with every call")
	duration    = flag.Duration("duration", 8*time.Second, "how long to keep calling")
	rate        = flag.Float64("rate", 40, "regular calls started per second (all callers together)")
	callers     = flag.Int("callers", 4, "regular calls at most in flight at once")
	slowImage   = flag.String("slow-image", "", "function image of the slow calls, if any")
	slowCallers = flag.Int("slow-callers", 0, "callers that call -slow-image back to back")
	maxMsg      = flag.Int("max-message-size", 6*1024*1024, "porch-server's --max-request-body-size")
	timeout     = flag.Duration("call-timeout", 290*time.Second, "deadline of each call")
)

// call is one finished call.
type call struct {
	Start   int64  `json:"start_ms"`
	End     int64  `json:"end_ms"`
	Slow    bool   `json:"slow"`
	Replica string `json:"replica,omitempty"`
	Code    string `json:"code"`
	Error   string `json:"error,omitempty"`
}

// change is a connectivity change of the channel.
type change struct {
	At    int64  `json:"at_ms"`
	State string `json:"state"`
}

type report struct {
	Calls   []call   `json:"calls"`
	Changes []change `json:"changes"`
}

var servedBy = regexp.MustCompile(`served-by-([a-z0-9-]+)`)

func main() {
	flag.Parse()
	if *image == "" || *input == "" {
		fmt.Fprintln(os.Stderr, "porch-runtime-client: -image and -input are required")
		os.Exit(2)
	}
	rl, err := os.ReadFile(*input)
	if err != nil {
		fmt.Fprintf(os.Stderr, "porch-runtime-client: %v\n", err)
		os.Exit(2)
	}
	// As porch-server's newGRPCFunctionRuntime dials.
	cc, err := grpc.NewClient(*address,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(*maxMsg),
			grpc.MaxCallSendMsgSize(*maxMsg),
		),
	)
	if err != nil {
		fmt.Fprintf(os.Stderr, "porch-runtime-client: dial %s: %v\n", *address, err)
		os.Exit(1)
	}
	defer cc.Close()
	client := pb.NewFunctionEvaluatorClient(cc)

	begin := time.Now()
	ms := func(t time.Time) int64 { return t.Sub(begin).Milliseconds() }
	var mu sync.Mutex
	var out report

	// Watch the channel's state without touching it.
	watchCtx, stopWatch := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		state := cc.GetState()
		for cc.WaitForStateChange(watchCtx, state) {
			state = cc.GetState()
			now := time.Now()
			mu.Lock()
			out.Changes = append(out.Changes, change{At: ms(now), State: state.String()})
			mu.Unlock()
			fmt.Fprintf(os.Stderr, "state %s at %dms\n", state, ms(now))
			if state == connectivity.Shutdown {
				return
			}
		}
	}()

	one := func(img string, slow bool) {
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		defer cancel()
		start := time.Now()
		res, err := client.EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{
			ResourceList: rl,
			Image:        img,
		})
		c := call{Start: ms(start), End: ms(time.Now()), Slow: slow, Code: "OK"}
		if err != nil {
			st, _ := status.FromError(err)
			c.Code = st.Code().String()
			c.Error = st.Message()
		} else if m := servedBy.FindSubmatch(res.ResourceList); m != nil {
			c.Replica = string(m[1])
		}
		mu.Lock()
		out.Calls = append(out.Calls, c)
		mu.Unlock()
	}

	deadline := begin.Add(*duration)
	var wg sync.WaitGroup
	for i := 0; i < *slowCallers && *slowImage != ""; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				one(*slowImage, true)
			}
		}()
	}
	// Regular calls: started at -rate, at most -callers in flight; a tick
	// that finds every caller busy is skipped.
	slots := make(chan struct{}, *callers)
	ticker := time.NewTicker(time.Duration(float64(time.Second) / *rate))
	for now := range ticker.C {
		if now.After(deadline) {
			break
		}
		select {
		case slots <- struct{}{}:
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				one(*image, false)
			}()
		default:
		}
	}
	ticker.Stop()
	wg.Wait()
	stopWatch()
	<-watched

	mu.Lock()
	defer mu.Unlock()
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintf(os.Stderr, "porch-runtime-client: %v\n", err)
		os.Exit(1)
	}
}
