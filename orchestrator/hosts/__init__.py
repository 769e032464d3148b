"""Ways to reach the host the campaign runs on: this machine, or SSH."""
