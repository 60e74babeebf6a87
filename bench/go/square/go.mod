module monglock.local/bench/square

go 1.21
