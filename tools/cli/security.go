package cli

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/metaqgo/metaq/broker/auth"
	"github.com/metaqgo/metaq/client"
)

// The command line's side of [security] (docs/security.md): TLS and
// credentials for every broker connection, the ZooKeeper digest, and
// `metaq auth` to make users-file entries.

const (
	EnvUser   = "METAQ_USER"    // default for --user
	EnvSecret = "METAQ_SECRET"  // the secret of --user (never a flag: it would show in ps)
	EnvZKAuth = "METAQ_ZK_AUTH" // default for --zk-auth
)

type securityFlags struct {
	tlsCA, tlsCert, tlsKey, tlsServerName string
	tlsOn                                 bool
	tlsPort                               int
	user, secretFile                      string
	zkAuth                                string

	tls    *tls.Config
	secret string
}

func addSecurityFlags(app *App, pf *pflag.FlagSet) {
	s := &app.sec
	pf.BoolVar(&s.tlsOn, "tls", false, "connect to brokers with TLS (implied by --tls-ca/--tls-cert); give the brokers' tlsPort")
	pf.StringVar(&s.tlsCA, "tls-ca", "", "PEM CA bundle that signed the brokers' certificates (default: the system roots)")
	pf.StringVar(&s.tlsCert, "tls-cert", "", "PEM client certificate (mutual TLS)")
	pf.StringVar(&s.tlsKey, "tls-key", "", "PEM key of --tls-cert")
	pf.StringVar(&s.tlsServerName, "tls-server-name", "", "name to verify in the broker's certificate (default: the host dialed)")
	pf.IntVar(&s.tlsPort, "tls-port", 0, "with TLS: dial this port on every broker found in ZooKeeper (the brokers' tlsPort, when they advertise their plain port)")
	pf.StringVar(&s.user, "user", app.getenv(EnvUser), "authenticate as this user (env "+EnvUser+"; the secret comes from "+EnvSecret+" or --secret-file)")
	pf.StringVar(&s.secretFile, "secret-file", "", "file whose first line is the secret of --user")
	pf.StringVar(&s.zkAuth, "zk-auth", app.getenv(EnvZKAuth), "ZooKeeper digest user:password, zk.zkAuth (env "+EnvZKAuth+")")
}

// loadSecurity reads the TLS files and the secret (PersistentPreRunE).
func (a *App) loadSecurity() error {
	s := &a.sec
	if s.tlsOn || s.tlsCA != "" || s.tlsCert != "" || s.tlsKey != "" {
		cfg, err := auth.ClientTLS(s.tlsCA, s.tlsCert, s.tlsKey, s.tlsServerName)
		if err != nil {
			return usageErr("%v", err)
		}
		s.tls = cfg
	}
	if s.user == "" {
		return nil
	}
	switch {
	case s.secretFile != "":
		f, err := os.Open(s.secretFile)
		if err != nil {
			return usageErr("--secret-file: %v", err)
		}
		defer f.Close()
		line, err := bufio.NewReader(f).ReadString('\n')
		if err != nil && line == "" {
			return usageErr("--secret-file %s: empty", s.secretFile)
		}
		s.secret = strings.TrimRight(line, "\r\n")
	default:
		s.secret = a.getenv(EnvSecret)
	}
	return nil
}

// dialRaw opens a protocol connection of its own to the broker at addr
// (the bench workloads that speak the protocol themselves) as the client
// does under the flags: to --tls-port with TLS, then `auth` as --user
// (docs/security.md). Without them: plain TCP (auth.DialBroker skips both).
func (a *App) dialRaw(ctx context.Context, addr string) (net.Conn, error) {
	s := &a.sec
	ctx, cancel := context.WithTimeout(ctx, max(a.ConnectTimeout, 5*time.Second))
	defer cancel()
	if s.tls != nil && s.tlsPort > 0 {
		if h, _, err := net.SplitHostPort(addr); err == nil {
			addr = net.JoinHostPort(h, strconv.Itoa(s.tlsPort))
		}
	}
	return auth.DialBroker(ctx, addr, s.tls, s.user, s.secret)
}

// applySecurity puts the flags into a client configuration.
func (a *App) applySecurity(cfg *client.Config) {
	cfg.TLS, cfg.TLSPort, cfg.User, cfg.Secret, cfg.ZKAuth = a.sec.tls, a.sec.tlsPort, a.sec.user, a.sec.secret, a.sec.zkAuth
}

func init() { AddCommand(newAuthCommand) }

func newAuthCommand(app *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "auth",
		Short: "Make users-file entries: hashed secrets, signing keys, bearer tokens",
		Long: `The broker's users file ([security] usersFile, or <zkRoot>/config/users with usersZK) stores
only hashes. These commands print the lines to paste into a user's section (docs/security.md).`,
	}
	var user string
	var cost int
	hash := &cobra.Command{
		Use:     "hash",
		Short:   "Read a secret from stdin; print its bcrypt hash (secret =) and HTTP signing key (signingKey =)",
		Example: `  printf '%s' "$SECRET" | metaq auth hash --user alice`,
		RunE: func(cmd *cobra.Command, args []string) error {
			line, err := bufio.NewReader(app.Stdin).ReadString('\n')
			secret := strings.TrimRight(line, "\r\n")
			if secret == "" {
				if err != nil {
					return usageErr("no secret on stdin")
				}
				return usageErr("empty secret")
			}
			h, err := auth.HashSecret(secret, cost)
			if err != nil {
				return err
			}
			fmt.Fprintf(app.Stdout, "[%s]\nsecret = %s\n", user, h)
			if user != "" {
				fmt.Fprintf(app.Stdout, "signingKey = %s\n", auth.SigningKey(user, secret))
			}
			return nil
		},
	}
	hash.Flags().StringVar(&user, "user", "", "user name (needed for the signing key)")
	hash.Flags().IntVar(&cost, "cost", 0, "bcrypt cost (default 10)")
	token := &cobra.Command{
		Use:   "token",
		Short: "Make a random bearer token; print it and the tokens = entry that stores its hash",
		RunE: func(cmd *cobra.Command, args []string) error {
			t, e := auth.NewToken()
			fmt.Fprintf(app.Stdout, "token: %s\ntokens = %s\n", t, e)
			return nil
		},
	}
	cmd.AddCommand(hash, token)
	return cmd
}
