package conf

import "time"

func init() { validators = append(validators, validateHTTP) }

// validateHTTP: the keys of the HTTP side (docs/observability.md).
func validateHTTP(c *Config, p *problems) {
	s := &c.System
	if s.MetricsMaxTopics < 0 {
		p.bad(sysSection, "metricsMaxTopics", "%d is negative", s.MetricsMaxTopics)
	}
	if s.MetricsMaxLagSeries < 0 {
		p.bad(sysSection, "metricsMaxLagSeries", "%d is negative", s.MetricsMaxLagSeries)
	}
	if s.MetricsLagInterval < time.Second {
		p.bad(sysSection, "metricsLagIntervalMs", "%v is below 1000 ms", s.MetricsLagInterval)
	}
}
