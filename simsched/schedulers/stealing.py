"""Work stealing: Cilk-style deques (THE protocol), random victims, sleeping thieves."""
