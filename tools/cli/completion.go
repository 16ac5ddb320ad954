package cli

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/metaqgo/metaq/zkmeta"
)

// Shell completion (`metaq completion bash|zsh|fish|powershell`) of the names a cluster knows:
// topics, consumer groups and broker ids, read from ZooKeeper (--zk / METAQ_ZK) within
// completionTimeout so that a Tab never hangs when ZooKeeper is away (nothing is suggested then).
//
// Every flag named --topic or --group gets its completion in addCompletions, so new commands
// have it for free; a command taking a topic or group argument sets ValidArgsFunction to
// app.completeTopicArg or app.completeGroupArg.

const completionTimeout = 2 * time.Second

// addCompletions walks the command tree and registers the completion of every --topic and
// --group flag that has none yet.
func (a *App) addCompletions(cmd *cobra.Command) {
	for flag, f := range map[string]cobra.CompletionFunc{"topic": a.completeTopics, "group": a.completeGroups} {
		if cmd.LocalNonPersistentFlags().Lookup(flag) == nil {
			continue
		}
		if _, ok := cmd.GetFlagCompletionFunc(flag); !ok {
			_ = cmd.RegisterFlagCompletionFunc(flag, f)
		}
	}
	for _, c := range cmd.Commands() {
		a.addCompletions(c)
	}
}

// completionNames reads names from ZooKeeper with the short completion timeout; nil when
// ZooKeeper cannot be asked.
func (a *App) completionNames(cmd *cobra.Command, read func(ctx context.Context, zc *zkmeta.Client) ([]string, error)) []string {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, min(completionTimeout, max(a.ConnectTimeout, time.Millisecond)))
	defer cancel()
	zc, err := a.zkClient(ctx)
	if err != nil {
		return nil
	}
	names, err := read(ctx, zc)
	if err != nil {
		return nil
	}
	return names
}

// withPrefix keeps the names starting with prefix (shells filter too, but not all of them).
func withPrefix(names []string, prefix string) []string {
	out := names[:0:0]
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	return out
}

func (a *App) completeTopics(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	names := a.completionNames(cmd, func(ctx context.Context, zc *zkmeta.Client) ([]string, error) { return zc.Topics(ctx) })
	return withPrefix(names, toComplete), cobra.ShellCompDirectiveNoFileComp
}

func (a *App) completeGroups(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	names := a.completionNames(cmd, func(ctx context.Context, zc *zkmeta.Client) ([]string, error) { return zc.Groups(ctx) })
	return withPrefix(names, toComplete), cobra.ShellCompDirectiveNoFileComp
}

// completeBrokers suggests broker ids, described by their address ("0\t127.0.0.1:8123").
func (a *App) completeBrokers(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	names := a.completionNames(cmd, func(ctx context.Context, zc *zkmeta.Client) ([]string, error) {
		bs, err := zc.Brokers(ctx)
		var out []string
		for _, b := range bs {
			out = append(out, strconv.Itoa(b.ID)+"\t"+b.Master)
		}
		return out, err
	})
	return withPrefix(names, toComplete), cobra.ShellCompDirectiveNoFileComp
}

// firstArg completes the first positional argument with f and nothing after it.
func firstArg(f cobra.CompletionFunc) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return f(cmd, args, toComplete)
	}
}

// completeTopicArg is the ValidArgsFunction of a command whose first argument is a topic.
func (a *App) completeTopicArg(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	return firstArg(a.completeTopics)(cmd, args, toComplete)
}

// completeGroupArg is the ValidArgsFunction of a command whose first argument is a group.
func (a *App) completeGroupArg(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	return firstArg(a.completeGroups)(cmd, args, toComplete)
}
