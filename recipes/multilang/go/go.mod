module example.com/gostrs

go 1.19
