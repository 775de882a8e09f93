"""Steer the loop from Slack (`rmi chat`): the `/rmi` command and the buttons on alerts, acting through the same
audited paths as the CLI and Dagster's own API."""
