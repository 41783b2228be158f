"""The `mixit` command line (mixit_lab.cli.main) and one module per subcommand group. The top layer: it may import
every package, and no package imports it. Library code raises ordinary exceptions; only this
package turns them into one-line errors and exit codes (mixit_lab.cli.common)."""
