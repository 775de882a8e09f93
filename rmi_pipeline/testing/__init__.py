"""What ships with the package to test a team's own code against the loop's contracts (`rmi check-recipe`)."""
